"""Every configuration key zoo knows, with its default and a comment saying what it does.

The layout follows gluoncv.torch (``DDP_CONFIG`` + ``CONFIG.{TRAIN,VAL,TEST,DATA,MODEL,LOG}``)
so its YAML files carry over with few edits. ``get_cfg()`` returns a copy of these defaults: the
Kinetics-400 SlowFast-R50 4x16 recipe, complete except for the data paths (set
CONFIG.DATA.*_PATH, or set CONFIG.DATA.SYNTHETIC.ENABLE True and a small model to train on the
generated data). A YAML file or ``KEY VALUE`` pairs on the command line override them (see
``zoo.config.load_config``).
"""

from yacs.config import CfgNode as CN

_C = CN()

# Version of this key layout (see zoo/config/version.py). A YAML without it is read as VERSION 1;
# an older one is upgraded (renamed keys named in one line), a newer one is refused.
_C.VERSION = 1

# --------------------------------------------------------------------------------------------------
# DDP_CONFIG: how the processes of one job find each other. The same YAML runs on every node.
# --------------------------------------------------------------------------------------------------
_C.DDP_CONFIG = CN()
# Number of nodes (machines) in the job; 0 = one node per WORLD_URLS entry.
_C.DDP_CONFIG.WORLD_SIZE = 1
# This node's index in [0, WORLD_SIZE). Found from WORLD_URLS when AUTO_RANK_MATCH is True;
# given on the command line (or as ZOO_NODE_RANK in the environment) it overrides the match.
_C.DDP_CONFIG.WORLD_RANK = 0
# One address or hostname per node, node 0 first (the old spelling WOLRD_URLS is also accepted).
_C.DDP_CONFIG.WORLD_URLS = ["127.0.0.1"]
# Find WORLD_RANK by matching this host's addresses against WORLD_URLS (ignored for one node).
_C.DDP_CONFIG.AUTO_RANK_MATCH = True
# Rendezvous address: "tcp://<node 0>:<port>", "file:///shared/path" or "env://" (MASTER_ADDR and
# MASTER_PORT from the environment). Node 0's launcher listens there; see docs/multi_node.md.
_C.DDP_CONFIG.DIST_URL = "tcp://127.0.0.1:10001"
# Collective backend: "nccl" (GPUs), "gloo" (CPU, Windows) or "auto" (nccl with GPUs, else gloo).
_C.DDP_CONFIG.DIST_BACKEND = "auto"
# The next three record the job's layout for the reader of the output folder's config.yaml: the
# launcher decides them and keeps them in zoo.utils.comm (get_world_size, get_rank,
# get_device_index), which is what the code asks; they are filled in from there when config.yaml
# and checkpoints are written. Any value given here is ignored.
# Total number of processes in the job (recorded).
_C.DDP_CONFIG.GPU_WORLD_SIZE = 1
# Global rank of the process that wrote config.yaml (recorded; always 0).
_C.DDP_CONFIG.GPU_WORLD_RANK = 0
# Local device index of that process, -1 = CPU (recorded).
_C.DDP_CONFIG.GPU = 0
# False = run in one process with no process group at all (no spawn, no barrier).
_C.DDP_CONFIG.DISTRIBUTED = True
# Worker processes per node when the node has no GPU (gloo backend). With GPUs: one per GPU.
_C.DDP_CONFIG.NUM_CPU_PROCS = 1
# Torch threads per worker process; 0 = the node's CPU cores divided by its worker processes.
_C.DDP_CONFIG.THREADS_PER_PROC = 0
# Seconds to wait for all ranks at start-up and in any collective before failing with a message.
_C.DDP_CONFIG.INIT_TIMEOUT = 300
# Seconds a rank may send no heartbeat before the job ends naming it, its node and its last step
# (0 = off). Each rank's heartbeat is a background thread, so slow steps, validation and checkpoint
# writes never count as silence; a stopped or frozen process or a lost node does. 120 s sits far
# above the few seconds a healthy process's thread can be held up, and below INIT_TIMEOUT, whose
# collective timeout would otherwise end the job first without naming the rank.
_C.DDP_CONFIG.HANG_TIMEOUT = 120
# Optional secret that is part of the job's identity at the node rendezvous: a launcher whose
# config or token differs is refused (a guard against a second job on the same DIST_URL port, not
# against an attacker). "" = none; ZOO_JOB_TOKEN in the environment wins over this key. Only a hash
# of it is sent; it is blanked in the config.yaml and checkpoints a run writes.
_C.DDP_CONFIG.JOB_TOKEN = ""
# Gradient compression between ranks: "none", "bf16" / "fp16" (each bucket sent in 16 bits:
# half the bytes) or "powersgd" (each weight's gradient sent as two rank-r factors, with error
# feedback; ~1.6% of the bytes at rank 4 for SlowFast-R50; a resume is not bit-exact). It pays only
# on a slow link between nodes; see zoo/accel/ddp_comm.py and docs/multi_node.md.
_C.DDP_CONFIG.GRAD_COMPRESSION = "none"
# With GRAD_COMPRESSION powersgd: the rank r of the factors (higher = closer to the exact mean,
# more bytes).
_C.DDP_CONFIG.POWERSGD_RANK = 4
# With GRAD_COMPRESSION powersgd: steps whose gradients are all-reduced whole before compression
# starts (at least 2).
_C.DDP_CONFIG.POWERSGD_START_STEP = 10
# Size in MB of DDP's gradient buckets (torch's default 25): each bucket is all-reduced as soon as
# its gradients are ready, overlapping the rest of the backward pass.
_C.DDP_CONFIG.BUCKET_CAP_MB = 25.0
# How the model's weights are kept across processes: "ddp" (every process holds all of them and
# gradients are all-reduced) or "fsdp" (PyTorch's FSDP2 fully_shard, per block then the root: each
# process holds 1/N of the weights, gradients and optimizer state, gathered per block when used;
# for models too large for one device). Needs torch >= 2.4; refuses GRAD_COMPRESSION and
# CONFIG.TRAIN.EMA_DECAY; one process trains unsharded. Checkpoints are the same full state dict
# either way. See docs/training.md.
_C.DDP_CONFIG.STRATEGY = "ddp"
# With STRATEGY fsdp: keep the sharded weights, gradients and optimizer state in CPU memory (FSDP2's
# CPUOffloadPolicy; the optimizer steps on the CPU): less device memory, slower steps.
_C.DDP_CONFIG.FSDP_CPU_OFFLOAD = False
# How many times the DDP_CONFIG launcher re-forms the job after a worker or a node fails: every
# node stops its workers, the nodes meet again and the workers resume from the newest complete
# checkpoint (AUTO_RESUME is implied on a restart). 0 = stop at the first failure, naming the rank.
# A worker that exits after a preemption signal (code 75) is never restarted. Under torchrun use
# its --max-restarts instead.
_C.DDP_CONFIG.MAX_RESTARTS = 0

# --------------------------------------------------------------------------------------------------
# CONFIG: what the job does.
# --------------------------------------------------------------------------------------------------
_C.CONFIG = CN()
# Python files (paths) or importable module names loaded before anything is built, so that the
# @MODEL_REGISTRY.register() / @DATASET_REGISTRY.register() in them run. Also --extra-modules.
_C.CONFIG.EXTRA_MODULES = []
# Base random seed; each rank uses SEED + rank, each data worker SEED + rank * 1000 + worker id.
_C.CONFIG.SEED = 0

# --------------------------------------------- TRAIN ----------------------------------------------
_C.CONFIG.TRAIN = CN()
# Number of training epochs.
_C.CONFIG.TRAIN.EPOCH_NUM = 10
# Clips per process per iteration (global batch = BATCH_SIZE x processes).
_C.CONFIG.TRAIN.BATCH_SIZE = 8
# Peak learning rate (the warmup ends on it; the Cosine and Step schedules start from it).
_C.CONFIG.TRAIN.LR = 0.1
# Optimizer: "SGD" (with MOMENTUM) or "AdamW" (betas 0.9, 0.999); W_DECAY applies to both.
_C.CONFIG.TRAIN.OPTIMIZER = "SGD"
# SGD momentum.
_C.CONFIG.TRAIN.MOMENTUM = 0.9
# SGD with Nesterov's momentum (PySlowFast's SOLVER.NESTEROV, True by default there); False =
# plain momentum (MMAction2's and gluoncv's SGD). Needs OPTIMIZER SGD and MOMENTUM above 0.
_C.CONFIG.TRAIN.NESTEROV = False
# Weight decay, on every trainable parameter except those of at most one dimension (biases, norm
# scales, layer scales) and those the model names in no_weight_decay() (docs/training.md).
_C.CONFIG.TRAIN.W_DECAY = 1e-4
# Learning-rate schedule after warmup: "Cosine" (to 0 at the last iteration) or "Step".
_C.CONFIG.TRAIN.LR_POLICY = "Cosine"
# Where the "Cosine" policy starts: True = at LR where the warmup ends, spanning the epochs after it
# (VideoMAE); False = at LR at epoch 0, spanning every epoch, the warmup climbing to the cosine's
# value where it ends (PySlowFast's SOLVER.COSINE_AFTER_WARMUP False, MMAction2's CosineAnnealingLR
# from epoch 0, timm's CosineLRScheduler): the LR after the warmup is then lower. "Step" ignores it.
_C.CONFIG.TRAIN.COSINE_AFTER_WARMUP = True
# Epochs at which the "Step" policy multiplies the LR by STEP.
_C.CONFIG.TRAIN.LR_MILESTONE = [40, 80]
# LR multiplier at each milestone of the "Step" policy.
_C.CONFIG.TRAIN.STEP = 0.1
# "Step" policy with explicit factors: the LR is LR x LR_FACTORS[i] from milestone i on (entry 0
# before the first milestone), so it needs len(LR_MILESTONE) + 1 numbers; STEP is then unused
# (PySlowFast's steps_with_relative_lrs). [] = multiply by STEP at each milestone.
_C.CONFIG.TRAIN.LR_FACTORS = []
# Linear warmup from WARMUP_START_LR to the schedule's LR over WARMUP_EPOCHS (updated every
# iteration), as PySlowFast, VideoMAE and MMAction2 warm up.
_C.CONFIG.TRAIN.USE_WARMUP = False
# Length of the warmup in epochs (may be fractional).
_C.CONFIG.TRAIN.WARMUP_EPOCHS = 1.0
# LR at the first iteration of warmup (at most the LR the warmup ends on; a config whose warmup
# would start above it stops with one line).
_C.CONFIG.TRAIN.WARMUP_START_LR = 0.01
# LR at the end of warmup: 0 = the schedule's LR there (LR for Cosine after the warmup; the
# cosine's value there with COSINE_AFTER_WARMUP False; LR x the factor of the step reached for
# Step), so it follows LR when LR changes. Any other value must be that LR: a
# config whose warmup would end elsewhere (and the LR jump there) stops with one line.
_C.CONFIG.TRAIN.WARMUP_END_LR = 0.0
# Multigrid training (Wu et al. 2020; PySlowFast's MULTIGRID.*): "" = off (every iteration at
# CLIP_LEN x CROP_SIZE with BATCH_SIZE); "long" = the long cycle: each epoch range trains a smaller
# (frames, crop) shape with a larger batch (batch x frames x crop^2 kept), the Step schedule
# re-timed over the longer run; "short" = the short cycle: two of every three iterations train a
# smaller crop with a larger batch, EPOCH_NUM and LR_MILESTONE x MULTIGRID_EPOCH_FACTOR;
# "long+short" = both. CNN families only (models with fixed position tables refuse it).
_C.CONFIG.TRAIN.MULTIGRID = ""
# Long cycle: [frames factor, crop factor] pairs of the shapes, smallest first, the last [1, 1].
_C.CONFIG.TRAIN.MULTIGRID_LONG_CYCLE_FACTORS = [
    [0.25, 0.5 ** 0.5], [0.5, 0.5 ** 0.5], [0.5, 1.0], [1.0, 1.0]]
# Short cycle: the crop factors (of MULTIGRID_DEFAULT_S) of the first two of every three iterations.
_C.CONFIG.TRAIN.MULTIGRID_SHORT_CYCLE_FACTORS = [0.5, 0.5 ** 0.5]
# Multigrid trains this many times the epochs of the plain schedule (in fewer iterations).
_C.CONFIG.TRAIN.MULTIGRID_EPOCH_FACTOR = 1.5
# Crop side the short-cycle factors and the scale-jitter rescaling refer to (0 = DATA.CROP_SIZE).
_C.CONFIG.TRAIN.MULTIGRID_DEFAULT_S = 0
# Resume from checkpoints/epoch_<N>.pth in the output folder (-1 = start fresh).
_C.CONFIG.TRAIN.RESUME_EPOCH = -1
# Resume from the newest complete checkpoint in the output folder when there is one (model,
# optimizer, LR schedule, grad scaler, epoch, iteration and every rank's RNG states).
_C.CONFIG.TRAIN.AUTO_RESUME = False
# Keep only the newest K epoch checkpoints (0 = keep all); best.pth (the best validation, see
# BEST_METRIC) is kept apart.
_C.CONFIG.TRAIN.KEEP_LAST = 0
# The validation figure that picks best.pth and that early stopping waits on, named as in
# metrics.jsonl: "top1", "top5", "mean_class_acc" (higher is better) or "loss" (lower is better).
_C.CONFIG.TRAIN.BEST_METRIC = "top1"
# Early stopping: end training after this many validations in a row without a new best
# BEST_METRIC (0 = train all EPOCH_NUM epochs). The epoch it stops at is checkpointed; best.pth
# holds the best.
_C.CONFIG.TRAIN.EARLY_STOP_PATIENCE = 0
# Linear scaling rule: when > 0, LR and WARMUP_START_LR (and the warmup's end) are multiplied by
# (global batch / REFERENCE_BATCH), so the same YAML keeps its recipe on more or fewer GPUs.
_C.CONFIG.TRAIN.REFERENCE_BATCH = 0
# LR multiplier for every parameter except the classifier head (e.g. 0.1 when fine-tuning).
_C.CONFIG.TRAIN.BACKBONE_LR_MULT = 1.0
# Layer-wise LR decay (0 = off; VideoMAE fine-tunes ViT-B with 0.75): a parameter in layer i of
# the model's L layers trains at LR x LAYER_DECAY ** (L - 1 - i); the head keeps the full LR.
# Layers: ViT blocks (VideoMAE, MViT, Video Swin), CNN stages (stem, res2..res5, head).
# Multiplies BACKBONE_LR_MULT. A model that does not name its layers stops with an error.
_C.CONFIG.TRAIN.LAYER_DECAY = 0.0
# Activation checkpointing: each block's activations are recomputed in the backward pass
# instead of kept (less memory, ~30% more compute); results are unchanged.
_C.CONFIG.TRAIN.ACT_CHECKPOINT = False
# Numeric precision: "auto" (bf16 where the device computes it natively: CUDA GPUs of compute
# capability 8.0+, CPUs with AVX512-BF16 or AMX; else fp32), "fp32", "bf16" (autocast, CPU and
# GPU) or "fp16" (autocast + grad scaler, GPU only). See docs/benchmarks.md for what each costs.
_C.CONFIG.TRAIN.PRECISION = "auto"
# Activation layout: "auto" (channels-last on CPUs and CUDA GPUs in every precision, elsewhere
# with bf16/fp16; else contiguous), "channels_last" (channels_last_3d for video) or "contiguous".
_C.CONFIG.TRAIN.MEMORY_FORMAT = "auto"
# On CPU only: run conv3d layers through zoo's CPU kernel routes (zoo/accel: PyTorch's slow
# conv3d kernel avoided, bf16 computed as the hardware would where oneDNN cannot); the same
# result. False runs PyTorch's kernels as they are. Never applied on a GPU.
_C.CONFIG.TRAIN.CPU_KERNELS = True
# Older switch: True = MEMORY_FORMAT "channels_last" whatever MEMORY_FORMAT says.
_C.CONFIG.TRAIN.CHANNELS_LAST = False
# Compile the model with torch.compile: "auto", True or False. The first step takes minutes to
# compile (the log says how long). "auto" = on for a CUDA GPU when an epoch has at least 3500
# iterations per process, no MULTIGRID and no FSDP sharding (then compiling pays within the first
# epoch); off on the CPU, where it did not pay (docs/benchmarks.md), and with ACT_CHECKPOINT
# (True with it stops with one line: the two do not run together). See docs/training.md.
_C.CONFIG.TRAIN.COMPILE = "auto"
# torch.compile mode: "auto" ("reduce-overhead" = inductor + CUDA graphs on a CUDA GPU with one
# process and no MULTIGRID, else "default"), "default", "reduce-overhead", "max-autotune" (CUDA
# graphs too, plus kernel autotuning) or "max-autotune-no-cudagraphs". A CUDA-graph mode with
# MULTIGRID (input shapes that change) falls back to "default" and the log says so.
_C.CONFIG.TRAIN.COMPILE_MODE = "auto"
# cuDNN benchmark mode (cuDNN times its convolution algorithms once per input shape): "auto" (on
# for a CUDA GPU without MULTIGRID, whose shapes are static), True or False (bitwise-repeatable
# runs want False). No effect on the CPU.
_C.CONFIG.TRAIN.CUDNN_BENCHMARK = "auto"
# Run the 3-channel (RGB) stem convolutions on tensor cores: a 3-D stem fed a channels-last clip
# as one 2-D conv (temporal taps stacked as channels, space to depth, channels padded to 8),
# others with their input padded to 8 channels with zeros: "auto" (on for a CUDA GPU, never on
# the CPU), True or False. The same sums; weights and checkpoints keep 3 input channels.
_C.CONFIG.TRAIN.STEM_PAD_CHANNELS = "auto"
# Accumulate gradients over this many iterations before each optimizer step.
_C.CONFIG.TRAIN.ACCUM_STEPS = 1
# Clip the global gradient L2 norm to this value (0 = no clipping).
_C.CONFIG.TRAIN.CLIP_GRAD_NORM = 0.0
# Convert BatchNorm layers to SyncBatchNorm (statistics over all ranks) when training on several.
_C.CONFIG.TRAIN.SYNC_BN = False
# Let DDP find, after each forward, the parameters no loss used (DDP's find_unused_parameters,
# MMAction2's key of that name): needed by a model with parameters some steps leave out (a branch
# not taken, a head left aside), slower otherwise (it searches the autograd graph every step).
# Several processes under DDP_CONFIG.STRATEGY ddp only.
_C.CONFIG.TRAIN.FIND_UNUSED_PARAMETERS = False
# Label smoothing of the cross-entropy loss (0 = none).
_C.CONFIG.TRAIN.LABEL_SMOOTHING = 0.0
# Mixup: Beta(alpha, alpha) blend of clip pairs and their labels (0 = off).
_C.CONFIG.TRAIN.MIXUP_ALPHA = 0.0
# CutMix: paste a box from another clip, labels weighted by area (0 = off). With both on, each
# batch uses one of the two at random.
_C.CONFIG.TRAIN.CUTMIX_ALPHA = 0.0
# Keep an exponential moving average of the weights with this decay (0 = off, e.g. 0.999); it is
# validated and saved beside the model.
_C.CONFIG.TRAIN.EMA_DECAY = 0.0
# Before each validation, recompute BatchNorm statistics over this many training batches (0 = off);
# with EMA_DECAY the EMA's statistics too, with the EMA's weights, so the EMA validated and saved
# has statistics of its own weights.
_C.CONFIG.TRAIN.PRECISE_BN_ITERS = 0
# What a non-finite (NaN/inf) loss or gradient does: "stop" ends the job with one line naming the
# iteration, the rank and the first non-finite tensor, saving no checkpoint from that state;
# "skip" drops that optimizer step (weights, optimizer state and EMA unchanged; the LR schedule
# still advances) and counts it in the log and metrics.jsonl. See docs/training.md.
_C.CONFIG.TRAIN.NONFINITE = "stop"
# Seconds from a preemption signal (SIGTERM or SIGUSR1: Slurm's --signal, a spot-instance notice)
# to the exit with code 75: every rank stops after the next step, rank 0 writes a mid-epoch
# checkpoint that AUTO_RESUME continues from exactly; past this time the processes exit without
# one. 60 s covers a step plus writing a large model's checkpoint to network storage, and fits in
# Slurm's --signal lead time (see docs/preemption.md and examples/slurm/).
_C.CONFIG.TRAIN.PREEMPT_GRACE = 60.0
# Extra trainer hooks, run after the built-in ones (progress bar, metrics, precise BN, validation,
# checkpoints): entries "path/to/file.py:ClassName" (a user file, loaded like EXTRA_MODULES) or
# "package.module:ClassName"; each class subclasses zoo.train.hooks.HookBase and is built with no
# arguments. See docs/hooks.md.
_C.CONFIG.TRAIN.HOOKS = []

# ---------------------------------------------- VAL -----------------------------------------------
_C.CONFIG.VAL = CN()
# Validate every FREQ epochs (and always after the last epoch); 0 = only after the last epoch.
_C.CONFIG.VAL.FREQ = 1
# Clips per process during validation.
_C.CONFIG.VAL.BATCH_SIZE = 8

# ---------------------------------------------- TEST ----------------------------------------------
_C.CONFIG.TEST = CN()
# Checkpoint evaluated by tools/test_ddp.py; "" = the newest epoch_N.pth in the run's checkpoint
# folder (not best.pth: name that file here to test the best validation epoch).
_C.CONFIG.TEST.CHECKPOINT = ""
# Videos per process during testing (each video yields TEST_NUM_SEGMENT x TEST_NUM_CROP views).
_C.CONFIG.TEST.BATCH_SIZE = 4

# ------------------------------------------- INFERENCE --------------------------------------------
# gluoncv.torch's feature-extraction block (its *_feat.yaml configs).
_C.CONFIG.INFERENCE = CN()
# True marks a feature-extraction config: tools/extract_features.py writes the pooled features
# before the classifier, one .npy per video of the validation list, to BASE_PATH/EXP_NAME/
# LOG.SAVE_DIR as gluoncv did (see docs/features.md). The tool extracts features whatever it says.
_C.CONFIG.INFERENCE.FEAT = False

# ---------------------------------------------- DATA ----------------------------------------------
_C.CONFIG.DATA = CN()
# Dataset class from DATASET_REGISTRY that reads the annotation lists: VideoListDataset (gluoncv
# list, CSV with a header, or a folder of class folders), KineticsDataset, UCF101Dataset,
# HMDB51Dataset, VideoFolderDataset, FrameFolderDataset, ImageFolderDataset, ImageListDataset
# (see docs/datasets.md).
_C.CONFIG.DATA.DATASET = "VideoListDataset"
# Training annotation list: one "relative/path num_frames label" per line (or another
# LIST_FORMAT).
_C.CONFIG.DATA.TRAIN_ANNO_PATH = ""
# Folder the training list's paths are relative to.
_C.CONFIG.DATA.TRAIN_DATA_PATH = ""
# Validation annotation list (also used by tools/test_ddp.py unless TEST_ANNO_PATH is set).
_C.CONFIG.DATA.VAL_ANNO_PATH = ""
# Folder the validation list's paths are relative to.
_C.CONFIG.DATA.VAL_DATA_PATH = ""
# Test annotation list for tools/test_ddp.py; "" = use the validation list.
_C.CONFIG.DATA.TEST_ANNO_PATH = ""
# Folder the test list's paths are relative to; "" = VAL_DATA_PATH.
_C.CONFIG.DATA.TEST_DATA_PATH = ""
# Format of the text annotation lists (VideoListDataset, FrameFolderDataset): "auto" (recognise
# it from the shape of every line; an ambiguous list stops with an error naming the candidates),
# "gluoncv" ("path num_frames label", paths may hold spaces), "mmaction2" ("path label"),
# "mmaction2_rawframes" ("dir total_frames label" or "dir offset total_frames label") or
# "pyslowfast" ("path label" or "path,label"). A first line with "path,label" columns is read as
# a CSV with a header. Multi-label lines are refused in every format (see docs/datasets.md).
_C.CONFIG.DATA.LIST_FORMAT = "auto"
# Number of classes (labels are 0..NUM_CLASSES-1); 0 = count them from the training data as
# DATASET reads it: its class names (classes.txt beside a list, UCF101's classInd.txt, a Kinetics
# CSV's labels, class folders), else the largest label + 1.
_C.CONFIG.DATA.NUM_CLASSES = 400
# Frames per clip fed to the model.
_C.CONFIG.DATA.CLIP_LEN = 32
# Temporal stride between sampled frames (gluoncv name; PySlowFast calls it SAMPLING_RATE).
_C.CONFIG.DATA.FRAME_RATE = 2
# Frame rate the strides above count in. 0 = each video's own frames, whatever its rate (gluoncv,
# MMAction2). 30 = PySlowFast's TARGET_FPS: a video of F fps is sampled FRAME_RATE * F / 30 of its
# frames apart (frames repeat below 30 fps), so a clip spans the same seconds in a 25, 30 or 60 fps
# video. Frame folders and images have no frame rate: their frames are FRAME_RATE apart.
_C.CONFIG.DATA.TARGET_FPS = 0.0
# Views per video at test time along time (evenly spaced clips).
_C.CONFIG.DATA.TEST_NUM_SEGMENT = 10
# Views per video at test time in space: 1 = centre crop, 3 = left/centre/right (or
# top/centre/bottom).
_C.CONFIG.DATA.TEST_NUM_CROP = 3
# Side of the square crop fed to the model.
_C.CONFIG.DATA.CROP_SIZE = 224
# Short side the frames are resized to for validation (and testing, unless TEST_SHORT_SIDE_SIZE).
_C.CONFIG.DATA.SHORT_SIDE_SIZE = 256
# Short side the frames are resized to for the test split (tools/test_ddp.py, zoo-predict) before
# its TEST_NUM_CROP crops; 0 = SHORT_SIDE_SIZE. MMAction2's Swin and PySlowFast's 3-crop recipes
# validate at one short side and test at another (MMAction2: Resize 256 for val, 224 for test).
_C.CONFIG.DATA.TEST_SHORT_SIDE_SIZE = 0
# Training short side is drawn uniformly from [min, max] per clip (scale jitter).
_C.CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE = [256, 320]
# False = resize every decoded frame to NEW_WIDTH x NEW_HEIGHT first, ignoring its aspect ratio,
# as gluoncv.torch's loader did (its default); the short-side resize and crops follow as usual.
_C.CONFIG.DATA.KEEP_ASPECT_RATIO = True
# Frame height after that resize (used only when KEEP_ASPECT_RATIO is False).
_C.CONFIG.DATA.NEW_HEIGHT = 256
# Frame width after that resize (used only when KEEP_ASPECT_RATIO is False).
_C.CONFIG.DATA.NEW_WIDTH = 340
# Randomly flip training clips left-right (turn off when left/right carries the label).
_C.CONFIG.DATA.RANDOM_FLIP = True
# Per-channel mean (RGB, 0..1 scale) subtracted after scaling pixels to [0, 1]; [] = that of the
# preprocessor_config.json of a Hugging Face folder given as MODEL.PRETRAINED (or beside the file
# given), else the model's (its facts: ImageNet for 2-D nets, Kinetics for video nets), else
# [0.45, 0.45, 0.45].
_C.CONFIG.DATA.MEAN = []
# Per-channel standard deviation (RGB) the pixels are divided by; [] = as for MEAN, else 0.225.
_C.CONFIG.DATA.STD = []
# DataLoader worker processes per training process (0 = load in the main process).
_C.CONFIG.DATA.NUM_WORKERS = 2
# How loader worker processes start: "auto" = "fork" on Linux (what every Python before 3.14
# used there, and what zoo is tested with), else the platform's default; or "fork", "forkserver",
# "spawn". Python 3.14 made "forkserver" Linux's default: such a worker imports torch again, and
# the dataset it is sent (decoders, transforms) must be importable by module name, so code from
# an EXTRA_MODULES .py file can be used there only when it is given as a module on PYTHONPATH.
_C.CONFIG.DATA.WORKER_START_METHOD = "auto"
# Training batch buffers each loader worker keeps in shared memory and fills again once the
# training process has freed every tensor that views one (0 = new shared memory for every batch,
# as PyTorch's default collate). New memory costs a page fault per 4 KB on first use (~1.6 ms per
# 32x224x224 uint8 clip on a 2-core VM); the kept buffers hold up to this many batches of shared
# memory per worker until the loader ends. A buffer some code still holds is never overwritten:
# the worker takes new memory instead (docs/datasets.md). Needs torch 2.10+ (older releases
# never free a received batch's storage); with an older torch no buffers are kept. On torch
# 2.14.1 with one worker, 4 gave 1.22x the clips/s of 0 (docs/benchmarks.md, section 4).
_C.CONFIG.DATA.BATCH_BUFFERS_PER_WORKER = 4
# Frame sampling: "dense" (CLIP_LEN frames FRAME_RATE apart from one window), "tsn" (NUM_SEGMENT
# equal segments, a CLIP_LEN-frame snippet from each) or "uniform" (CLIP_LEN frames, one per equal
# segment of the whole video).
_C.CONFIG.DATA.SAMPLING = "dense"
# Segments of the "tsn" sampling (clips have NUM_SEGMENT x CLIP_LEN frames).
_C.CONFIG.DATA.NUM_SEGMENT = 1
# Training clips per video per item: N > 1 samples N clips (each its own crop, flip and jitter,
# and with CLIPS_WINDOW "independent" its own random window) from ONE open and decode of the video
# (repeated augmentation; PySlowFast's AUG.NUM_SAMPLE). TRAIN.BATCH_SIZE counts clips, so it must
# be a multiple of N (a step then holds BATCH_SIZE / N videos) and an epoch, still one pass over
# the videos, has N x as many clips and steps. Validation and test are unaffected (they keep their
# own views).
_C.CONFIG.DATA.CLIPS_PER_VIDEO = 1
# With CLIPS_PER_VIDEO > 1: "independent" (each clip draws its own window; the union of the
# windows is decoded once) or "shared" (one window, decoded once, augmented N times: exactly
# PySlowFast's AUG.NUM_SAMPLE, and the cheaper of the two).
_C.CONFIG.DATA.CLIPS_WINDOW = "independent"
# Video reader: "auto" (per file, the fastest reader that is exact for its container; see
# docs/datasets.md), "pyav" (seeks, decodes only the needed frames), "opencv", "torchcodec" or
# "decord" (if installed), or "frames" (the list's paths are folders of extracted frames).
_C.CONFIG.DATA.DECODER = "auto"
# File name of frame i (numbered from 1, as MMAction2's denseflow and the TSN/gluoncv extraction
# scripts write them) inside a frame folder, for DECODER "frames": a str.format pattern. Only
# these files are read: optical-flow images beside them (flow_x_00001.jpg, x_00001.jpg) are not.
_C.CONFIG.DATA.FRAME_TEMPLATE = "img_{:05d}.jpg"
# Decoder threads per video (FFmpeg's scaler uses as many). 0 = automatic: frames of 256x256 and
# more get each loader worker's share of the cores, max(1, cores // NUM_WORKERS) (every core with
# NUM_WORKERS 0), smaller frames 1 thread; -1 = FFmpeg's own choice, one thread per core in every
# worker (oversubscribes the cores with several workers; see docs/benchmarks.md, "The loader per
# core"). Loader workers run torch and OpenCV on one thread each.
_C.CONFIG.DATA.DECODE_THREADS = 0
# True = the reader scales frames to the first size the transform needs (short side = the largest
# TRAIN_SHORT_SIDE_RANGE for training, SHORT_SIDE_SIZE for val, TEST_SHORT_SIDE_SIZE (or
# SHORT_SIDE_SIZE) for test, NEW_HEIGHT x NEW_WIDTH when
# KEEP_ASPECT_RATIO is False; never enlarged) while it converts them to RGB, in one pass of
# FFmpeg's bilinear scaler (pyav; other readers hand over full frames). Pixels differ from a
# full-size decode + torch resize by interpolation details only (docs/benchmarks.md, "End-to-end
# clip loading at real sizes").
_C.CONFIG.DATA.DECODE_RESIZE = True
# Where training clips are normalised (mean/std): "device" (the loader hands over uint8 clips and
# the training step normalises them after moving them to its device: a quarter of the bytes through
# the loader's shared memory and the host-to-GPU copy, and no float pass in the loader workers;
# the same numbers reach the model) or "loader" (the workers hand over float clips). Validation
# and test clips are always normalised by the loader.
_C.CONFIG.DATA.NORMALIZE_ON = "device"
# Where training clips' random crops are resized to CROP_SIZE (the scale jitter) and flipped:
# "loader" (the workers) or "device" (the workers copy each unresized cut, and the training step
# resizes and flips it on its device after the copy: 1.16x a worker's clips per CPU second on
# 340x256 H.264, for a GPU with time to spare while the loader is the limit; the same picture up
# to one level of rounding; docs/datasets.md, "Transforms"). "device" needs NORMALIZE_ON device,
# no COLOR_JITTER, RAND_AUGMENT or RANDOM_ERASE (they work on the resized crop in the loader), and
# a dataset built on ClipDataset.
_C.CONFIG.DATA.RESIZE_ON = "loader"
# Seconds allowed to open and decode one video (x TEST_NUM_SEGMENT at test time, x CLIPS_PER_VIDEO
# in training); a video over it counts as unreadable. 0 = no limit.
_C.CONFIG.DATA.DECODE_TIMEOUT = 30.0
# Videos tried for one item (the item's own, then random stand-ins) before the job stops.
_C.CONFIG.DATA.MAX_TRIES = 10
# Stop the job when more than this share of an epoch's videos could not be read (1.0 = never).
_C.CONFIG.DATA.MAX_BAD_FRACTION = 0.1
# Seconds a training process waits for one batch from its loader workers, whatever the wait is
# blocked on, before it kills them and stops with an error naming the worker (the last guard
# against a decoder stuck inside C code or a stopped worker); 0 = wait forever.
_C.CONFIG.DATA.LOADER_TIMEOUT = 900
# Colour jitter of training clips: [brightness, contrast, saturation, hue] as in torchvision's
# ColorJitter, drawn once per clip (all 0 = off; hue is the costly one).
_C.CONFIG.DATA.COLOR_JITTER = [0.0, 0.0, 0.0, 0.0]
# RandAugment of training clips: a timm policy string ("" = off), e.g. "rand-m7-n4-mstd0.5-inc1"
# (VideoMAE / MViTv2 / MMAction2 fine-tuning; PySlowFast's AUG.AA_TYPE): timm's ops on each uint8
# frame of the crop, one draw of ops and magnitudes per clip, so every frame gets the same change.
_C.CONFIG.DATA.RAND_AUGMENT = ""
# Random erasing of training clips: the chance (0 = off) that one box (2%-1/3 of the frame,
# aspect 0.3-3.3) is filled with per-pixel normal noise, the same box in every frame, after the
# normalisation (timm's RandomErasing mode "pixel", PySlowFast's AUG.RE_PROB). With it on, the
# loader normalises training clips whatever NORMALIZE_ON says.
_C.CONFIG.DATA.RANDOM_ERASE = 0.0
# Official split (1, 2 or 3) read by UCF101Dataset / HMDB51Dataset from their split files.
_C.CONFIG.DATA.OFFICIAL_SPLIT = 1

# The generated motion dataset (the embedded default): written on first use, then read through the
# same annotation-list loader as any real dataset. When ENABLE is True the four *_ANNO_PATH /
# *_DATA_PATH keys above are pointed at it.
_C.CONFIG.DATA.SYNTHETIC = CN()
# Generate (once) and use the synthetic motion dataset instead of the lists above.
_C.CONFIG.DATA.SYNTHETIC.ENABLE = False
# Cache folder; "" = $ZOO_CACHE or ~/.cache/zoo. A sub-folder per generator setting is created.
_C.CONFIG.DATA.SYNTHETIC.ROOT = ""
# Training videos per class.
_C.CONFIG.DATA.SYNTHETIC.TRAIN_PER_CLASS = 60
# Validation videos per class.
_C.CONFIG.DATA.SYNTHETIC.VAL_PER_CLASS = 25
# Frames per generated video.
_C.CONFIG.DATA.SYNTHETIC.NUM_FRAMES = 32
# Frame size (height = width) of the generated videos, even.
_C.CONFIG.DATA.SYNTHETIC.SIZE = 64
# Seed of the generator (same seed = byte-identical lists and the same videos).
_C.CONFIG.DATA.SYNTHETIC.SEED = 0

# --------------------------------------------- MODEL ----------------------------------------------
_C.CONFIG.MODEL = CN()
# Registered model name (see zoo.list_models()).
_C.CONFIG.MODEL.NAME = "slowfast_4x16_resnet50"
# Weights to start from: "" or False = random init; True = the architecture's default published
# weights (Kinetics-400 for video models); a weights tag such as "kinetics400" (see
# `python tools/list_models.py --weights`); a local checkpoint path; or an http(s) URL. Tags and
# URLs are downloaded once into $ZOO_HOME/weights (default ~/.cache/zoo/weights); any format
# (zoo, PySlowFast, PyTorchVideo, MMAction2, torchvision) is recognised from its keys.
_C.CONFIG.MODEL.PRETRAINED = ""
# Train only the classifier head (fine-tuning a pretrained backbone).
_C.CONFIG.MODEL.FREEZE_BACKBONE = False
# Keep BatchNorm statistics and affine parameters fixed (small fine-tuning batches).
_C.CONFIG.MODEL.FREEZE_BN = False
# Extra keyword arguments for the model builder, as a flat list of KEY, VALUE, ... pairs
# (e.g. ["dropout", 0.2]); values are parsed like command-line overrides.
_C.CONFIG.MODEL.KWARGS = []
# Stochastic depth (drop path) of the last residual block, linear from 0 at the first; passed to
# the builder as drop_path. 0 = the model's own default (0 for CNNs and VideoMAE, 0.1-0.3 Swin,
# MVIT.DROPPATH_RATE for MViT).
_C.CONFIG.MODEL.DROP_PATH = 0.0

# ---------------------------------------------- LOG -----------------------------------------------
_C.CONFIG.LOG = CN()
# Root folder of all runs.
_C.CONFIG.LOG.BASE_PATH = "./output"
# This run's sub-folder: BASE_PATH/EXP_NAME holds config.yaml, logs, metrics.jsonl, checkpoints/.
# A training job's rank 0 holds it (training.lock) while it runs: a second training job on the
# same folder stops with one line, so two jobs at once need two names.
_C.CONFIG.LOG.EXP_NAME = "default"
# TensorBoard event files go to BASE_PATH/EXP_NAME/<LOG_DIR>.
_C.CONFIG.LOG.LOG_DIR = "tb_log"
# Checkpoints go to BASE_PATH/EXP_NAME/<SAVE_DIR> (unless CHECKPOINT_DIR names a folder).
_C.CONFIG.LOG.SAVE_DIR = "checkpoints"
# The folder checkpoints are written to and where AUTO_RESUME, restarts and test_ddp.py look for
# them, apart from the run's logs, metrics.jsonl and config.yaml (which stay in BASE_PATH/EXP_NAME):
# a folder an engine syncs or keeps (a Kubernetes volume, Ray's). Empty = the engine's own folder
# when it defines one (SageMaker, SM_CURRENT_HOST set: /opt/ml/checkpoints, which it copies to and
# from S3), else BASE_PATH/EXP_NAME/<SAVE_DIR>. One training job at a time per folder: a second
# one given the same folder stops (training.lock). See docs/multi_node.md, "Engines".
_C.CONFIG.LOG.CHECKPOINT_DIR = ""
# Save a checkpoint every SAVE_FREQ epochs (the last epoch is always saved).
_C.CONFIG.LOG.SAVE_FREQ = 1
# Log training loss / LR / speed every DISPLAY_FREQ iterations.
_C.CONFIG.LOG.DISPLAY_FREQ = 10
# Show a tqdm progress bar on rank 0 (off automatically when the console is not a terminal).
_C.CONFIG.LOG.PROGRESS_BAR = True
