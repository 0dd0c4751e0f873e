"""VideoMAE: Hugging Face's parameter counts, and Hugging Face's logits through every way its
weights come in (a state dict converted with --from huggingface, a save_pretrained folder, an
MMAction2-named file), checked against the real ``transformers`` package (a test-only
dependency) on random weights; config.json checked against the model."""

import json
import logging
import re

import pytest
import torch
from helpers import videomae_as_mmaction2

import zoo
from zoo.models import model_facts
from zoo.models.flops import count_params, measure
from zoo.models.weights.convert import ConversionError, convert_checkpoint, convert_state_dict

transformers = pytest.importorskip("transformers")

# The name this transformers gives the q / v bias flag: "qv_bias" (transformers 5), "qkv_bias"
# (4.x; what older Hub config.json files carry).
BIAS_FLAG = "qv_bias" if "qv_bias" in transformers.VideoMAEConfig().to_dict() else "qkv_bias"

# The Hugging Face config of each registered size (VideoMAE's ViT-S/B/L; mlp ratio 4).
SIZES = {"videomae_vit_s": (384, 12, 6), "videomae_vit_b": (768, 12, 12),
         "videomae_vit_l": (1024, 24, 16)}
# A small config for the logits checks: 4 frames of 32x32 -> 2 x 2 x 2 tokens of width 24.
TINY = dict(embed_dim=24, depth=2, num_heads=3, frames=4, crop_size=32)
CLASSES = 5


def _hf_config(embed_dim=24, depth=2, num_heads=3, frames=4, crop_size=32, mlp_ratio=4,
               **extra):
    return transformers.VideoMAEConfig(
        hidden_size=embed_dim, num_hidden_layers=depth, num_attention_heads=num_heads,
        intermediate_size=mlp_ratio * embed_dim, num_frames=frames, image_size=crop_size,
        patch_size=16, tubelet_size=2, layer_norm_eps=1e-6, **extra)


def _hf_model(seed=0, num_labels=CLASSES, **extra):
    """A tiny VideoMAEForVideoClassification, every parameter random (LayerNorms and the q / v
    biases too), in eval mode; its fc_norm epsilon set to zoo's 1e-6 (transformers fixes 1e-5)."""
    torch.manual_seed(seed)
    model = transformers.VideoMAEForVideoClassification(_hf_config(num_labels=num_labels,
                                                                   **extra)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    if model.fc_norm is not None:
        model.fc_norm.eps = 1e-6
    return model


def _clip(seed=1, frames=4):
    torch.manual_seed(seed)
    return torch.randn(2, 3, frames, 32, 32)


def _same_logits(model, hf, x=None):
    x = _clip() if x is None else x
    with torch.no_grad():
        ours = model.eval()(x)
        theirs = hf(pixel_values=x.permute(0, 2, 1, 3, 4)).logits  # HF: (B, T, C, H, W)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max(), (ours, theirs)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_parameter_counts_are_hugging_face_s(name):
    width, depth, heads = SIZES[name]
    config = transformers.VideoMAEConfig(hidden_size=width, num_hidden_layers=depth,
                                         num_attention_heads=heads,
                                         intermediate_size=4 * width, num_labels=400)
    with torch.device("meta"):
        hf = transformers.VideoMAEForVideoClassification(config)
        model = zoo.create_model(name, num_classes=400)
    assert count_params(model) == count_params(hf) == model_facts(name)["params"]
    assert "pos_embed" not in model.state_dict()  # a fixed table, as in Hugging Face's files
    assert model.pos_embed.shape == (1, 8 * 14 * 14, width)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_gflops_are_recounted(name):
    assert measure(name)["gflops"] == pytest.approx(model_facts(name)["gflops"], abs=0.01)


def test_state_dict_converts_to_the_same_logits():
    """transformers 5's in-memory names (query.bias / value.bias) and the files' (q_bias /
    v_bias, also transformers 4's in-memory names) both convert."""
    hf = _hf_model()
    state = hf.state_dict()
    as_files = {re.sub(r"attention\.attention\.(query|value)\.bias$",
                       lambda m: f"attention.attention.{m.group(1)[0]}_bias", k): v
                for k, v in state.items()}
    as_memory = {re.sub(r"attention\.attention\.([qv])_bias$",
                        lambda m: "attention.attention." + {"q": "query", "v": "value"}[
                            m.group(1)] + ".bias", k): v
                 for k, v in state.items()}
    assert any(k.endswith("attention.attention.q_bias") for k in as_files)
    assert any(k.endswith("attention.attention.query.bias") for k in as_memory)
    for source in (as_files, as_memory):
        converted, classes, _ = convert_state_dict(source, "huggingface", "videomae_vit_b",
                                                   **TINY)
        assert classes == CLASSES
        model = zoo.create_model("videomae_vit_b", num_classes=classes, **TINY)
        model.load_state_dict(converted)
        _same_logits(model, hf)


def test_leftover_keys_are_errors():
    state = dict(_hf_model().state_dict())
    state["videomae.encoder.layer.0.attention.attention.key.bias"] = torch.zeros(24)
    with pytest.raises(ConversionError, match=r"key\.bias"):
        convert_state_dict(state, "huggingface", "videomae_vit_b", **TINY)


def test_hub_folder_loads_with_create_model_and_converts(tmp_path):
    hf = _hf_model()
    hf.save_pretrained(tmp_path / "hub")
    assert (tmp_path / "hub" / "model.safetensors").is_file()
    model = zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                             pretrained=str(tmp_path / "hub"), **TINY)
    _same_logits(model, hf)
    # The same folder through the converter, then its zoo checkpoint.
    from zoo.cli.convert_checkpoint import main

    out = tmp_path / "zoo.pth"
    assert main(["--from", "huggingface", "--model", "videomae_vit_b", str(tmp_path / "hub"),
                 str(out), "--kwargs", *[str(x) for kv in TINY.items() for x in kv]]) == 0
    _same_logits(zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(out),
                                  **TINY), hf)
    # The safetensors file on its own (its config.json beside it) loads too.
    model = zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                             pretrained=str(tmp_path / "hub" / "model.safetensors"), **TINY)
    _same_logits(model, hf)


def test_a_converted_hub_folder_records_the_class_names_of_id2label(tmp_path):
    """config.json's id2label becomes the converted checkpoint's ``classes`` (the names testing
    and prediction print), when it names every class; transformers' placeholder LABEL_<id>
    names and a mapping that misses a class are not recorded."""
    from zoo.config import get_cfg
    from zoo.infer.checkpoint_model import checkpoint_model
    from zoo.utils.checkpoint_io import load_checkpoint

    names = ["abseiling", "air drumming", "archery", "baking", "bowling"]
    _hf_model().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    cases = [({str(i): n for i, n in enumerate(names)}, names),
             ({str(i): f"LABEL_{i}" for i in range(CLASSES)}, []),
             ({str(i): names[i] for i in range(CLASSES - 1)}, [])]
    for id2label, want in cases:
        config["id2label"] = id2label
        (tmp_path / "config.json").write_text(json.dumps(config))
        out = str(tmp_path / "zoo.pth")
        convert_checkpoint(str(tmp_path), out, "huggingface", "videomae_vit_b", dict(TINY))
        state = load_checkpoint(out)
        assert state.get("classes", []) == want
        assert checkpoint_model(get_cfg(), out, state).classes == want


@pytest.mark.parametrize("key", ["qv_bias", "qkv_bias"])
def test_the_q_v_bias_flag_is_read_under_both_names(tmp_path, key):
    hf = _hf_model(**{BIAS_FLAG: False})
    assert not any(k.endswith(("_bias", "query.bias")) for k in hf.state_dict())
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop(BIAS_FLAG)
    config[key] = False
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path),
                             qv_bias=False, **TINY)
    assert model.blocks[0].attn.q_bias is None
    _same_logits(model, hf)
    with pytest.raises(ConversionError) as e:  # the flag is checked before any key
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path), **TINY)
    assert "qv_bias (qkv_bias) is False but the model has True" in str(e.value)


@pytest.mark.parametrize("key,value,model_value", [("num_attention_heads", 2, 3),
                                                   ("use_mean_pooling", False, True)])
def test_a_mismatching_config_json_is_one_line(tmp_path, key, value, model_value):
    _hf_model().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    for attempt in (
        lambda: zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                                 pretrained=str(tmp_path), **TINY),
        lambda: convert_checkpoint(str(tmp_path), str(tmp_path / "out.pth"), "huggingface",
                                   "videomae_vit_b", TINY),
    ):
        with pytest.raises(ConversionError) as e:
            attempt()
        msg = str(e.value)
        shown = value[0] if isinstance(value, list) else value
        assert "\n" not in msg and str(tmp_path) in msg
        assert f"config.json {key} is {shown!r} but the model has {model_value!r}" in msg


@pytest.mark.parametrize("key,value,model_value", [("num_frames", 16, 4),
                                                   ("image_size", [224, 224], 32)])
def test_weights_trained_on_other_clips_load_with_a_warning(tmp_path, caplog, key, value,
                                                            model_value):
    """The position table is a fixed sine table that follows the model's clip: weights of a
    16-frame run fine-tune at 4 frames (a warning says they were trained on other clips)."""
    reference = _hf_model()
    reference.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING):
        model = zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path),
                                 **TINY)
    shown = value[0] if isinstance(value, list) else value
    assert any(f"config.json {key} is {shown!r} but the model has {model_value!r}: the weights "
               "fit" in r.getMessage() for r in caplog.records)
    _same_logits(model, reference)  # at the model's own clip, where both are defined


@pytest.mark.parametrize("kind", ["VideoMAEForPreTraining", "VideoMAEModel"])
def test_pretraining_and_base_model_weights_fine_tune_with_a_fresh_head(tmp_path, caplog, kind):
    """VideoMAE fine-tunes start from self-supervised weights (the Hub's videomae-base is a
    VideoMAEForPreTraining): the encoder loads, the decoder and the final LayerNorm of a model
    without mean pooling are not used, and fc_norm and the classifier start fresh - what
    transformers' from_pretrained and VideoMAE's run_class_finetuning.py do."""
    torch.manual_seed(0)
    config = _hf_config(use_mean_pooling=False, decoder_hidden_size=16,
                        decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
                        decoder_intermediate_size=32)
    hf = getattr(transformers, kind)(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.2)
    hf.save_pretrained(tmp_path)
    torch.manual_seed(1)
    fresh = zoo.create_model("videomae_vit_b", num_classes=CLASSES, **TINY)
    torch.manual_seed(1)
    with caplog.at_level(logging.INFO):
        model = zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                                 pretrained=str(tmp_path), **TINY)
    encoder = hf.videomae if kind == "VideoMAEForPreTraining" else hf
    assert torch.equal(model.patch_embed.proj.weight,
                       encoder.embeddings.patch_embeddings.projection.weight)
    attn = encoder.encoder.layer[1].attention.attention
    assert torch.equal(model.blocks[1].attn.qkv.weight,
                       torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]))
    assert torch.equal(model.blocks[1].mlp.fc2.weight, encoder.encoder.layer[1].output.dense.weight)
    for name in ("head.weight", "head.bias", "fc_norm.weight", "fc_norm.bias"):
        assert torch.equal(model.state_dict()[name], fresh.state_dict()[name]), name
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "fc_norm and the classifier start fresh" in said
    assert ("decoder tensors are not used" in said) == (kind == "VideoMAEForPreTraining")
    # Converting them to a zoo file would need a classifier: the refusal says what to do.
    with pytest.raises(ConversionError, match="have no classifier to convert; give them to "
                                              "training as CONFIG.MODEL.PRETRAINED directly"):
        convert_checkpoint(str(tmp_path), str(tmp_path / "out.pth"), "huggingface",
                           "videomae_vit_b", TINY)


def test_unreadable_safetensors_is_one_line(tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ConversionError) as e:
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(bad), **TINY)
    assert "\n" not in str(e.value) and "not a readable safetensors file" in str(e.value)


def test_mmaction2_keys_convert_to_the_same_logits(tmp_path):
    from transformers.models.videomae.modeling_videomae import get_sinusoid_encoding_table

    hf = _hf_model()
    table = get_sinusoid_encoding_table(8, 24)  # Hugging Face's own table
    state = videomae_as_mmaction2(hf.state_dict(), table)
    converted, classes, _ = convert_state_dict(state, "mmaction2", "videomae_vit_b", **TINY)
    model = zoo.create_model("videomae_vit_b", num_classes=classes, **TINY)
    model.load_state_dict(converted)
    assert torch.allclose(model.pos_embed, table, atol=1e-6)
    _same_logits(model, hf)
    # As MMAction2 saves it ({"meta", "state_dict"}), loaded by create_model.
    torch.save({"meta": {}, "state_dict": state}, tmp_path / "mma.pth")
    _same_logits(zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                                  pretrained=str(tmp_path / "mma.pth"), **TINY), hf)
    state["backbone.pos_embed"] = table + 0.1  # a learned table: refused
    with pytest.raises(ConversionError, match="pos_embed"):
        convert_state_dict(state, "mmaction2", "videomae_vit_b", **TINY)


def test_other_clip_sizes_get_the_table_of_a_model_built_for_them():
    small = zoo.create_model("videomae_vit_b", num_classes=CLASSES, **TINY).eval()
    longer = zoo.create_model("videomae_vit_b", num_classes=CLASSES,
                              **{**TINY, "frames": 8}).eval()
    longer.load_state_dict(small.state_dict())
    x = _clip(frames=8)
    with torch.no_grad():
        assert torch.equal(small(x), longer(x))


def test_videomae_is_a_classifier_and_fine_tunes_its_head():
    model = zoo.create_model("videomae_vit_s", num_classes=5, **TINY)
    assert model.get_classifier() is model.head
    assert len(model.blocks) == 2 and not hasattr(model, "norm")  # fc_norm replaces it
    model.reset_classifier(3)
    with torch.no_grad():
        assert model.eval()(_clip()).shape == (2, 3)


# ----------------------------------------------------------------------------- fine-tuning
FINETUNE = "configs/custom/videomae_vit_b_finetune.yaml"
HUB = "/MCG-NJU/videomae-base-finetuned-kinetics/resolve/main/"


def _serve_hub_folder(server, folder):
    """Serve a save_pretrained folder where the table's Hub URL points (through the mirror)."""
    for name in ("model.safetensors", "config.json"):
        server.files[HUB + name] = (folder / name).read_bytes()


def _my_videos(tmp_path, size, frames):
    import subprocess
    import sys

    from helpers import ROOT

    data = tmp_path / "mine"
    gen = subprocess.run([sys.executable, "-m", "zoo.data.synthetic", "--out", str(data),
                          "--num-classes", "3", "--train-per-class", "2", "--val-per-class", "1",
                          "--frames", str(frames), "--size", str(size), "--seed", "7"],
                         cwd=ROOT, capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    return ["DATA.TRAIN_ANNO_PATH", str(data / "train.txt"), "DATA.TRAIN_DATA_PATH", str(data),
            "DATA.VAL_ANNO_PATH", str(data / "val.txt"), "DATA.VAL_DATA_PATH", str(data)]


def _finetune(tmp_path, server, overrides, timeout=240):
    from helpers import run_tool

    env = {"ZOO_HOME": str(tmp_path / "zoo_home"), "ZOO_WEIGHTS_MIRROR": server.url}
    r = run_tool("train_ddp.py", ["--config-file", FINETUNE, *overrides,
                                  "DDP_CONFIG.NUM_CPU_PROCS", "2", "DATA.NUM_WORKERS", "0",
                                  "TRAIN.EPOCH_NUM", "1", "LOG.BASE_PATH", str(tmp_path),
                                  "LOG.EXP_NAME", "ft"], timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted(p for p, _ in server.requests) == [HUB + "config.json",
                                                     HUB + "model.safetensors"]
    run_dir = tmp_path / "ft"
    assert "re-initialised head" in (run_dir / "log_rank0.txt").read_text()
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in records if r.get("split") == "val"][-1]
    assert val["num_videos"] == 3 and val["top5"] == 100.0  # 3 classes: top-5 always right
    return run_dir


def test_finetune_config_runs_from_hub_weights_on_two_processes(tmp_path, server):
    """The shipped config, a small-width VideoMAE by MODEL.KWARGS, from Hub-format weights (a
    save_pretrained folder with the published 400 classes) served where the table's tag points."""
    hf = _hf_model(num_labels=400)
    hf.save_pretrained(tmp_path / "hub")
    _serve_hub_folder(server, tmp_path / "hub")
    kwargs = "['embed_dim', 24, 'depth', 2, 'num_heads', 3, 'frames', 4, 'crop_size', 32, " \
             "'drop_path', 0.1]"
    _finetune(tmp_path, server, [
        *_my_videos(tmp_path, size=36, frames=8), "MODEL.KWARGS", kwargs,
        "DATA.CLIP_LEN", "4", "DATA.FRAME_RATE", "2", "DATA.CROP_SIZE", "32",
        "DATA.SHORT_SIDE_SIZE", "32", "DATA.TRAIN_SHORT_SIDE_RANGE", "[32, 36]",
        "DATA.TEST_NUM_SEGMENT", "1", "DATA.TEST_NUM_CROP", "1",
        "TRAIN.BATCH_SIZE", "2", "VAL.BATCH_SIZE", "2"])


@pytest.mark.slow
def test_full_vit_b_from_the_config_loads_hub_weights_and_trains_a_step(tmp_path, server,
                                                                        monkeypatch):
    """The config's own ViT-B (full size), its tag's Hub-format weights (a full-size
    save_pretrained folder with random weights, served on loopback where the tag points):
    loaded, then one forward / backward on a 16x224x224 clip. (A full training run of ViT-B on
    2 CPU cores takes minutes; the run itself is checked at a small width above.)"""
    from zoo.config import load_config
    from zoo.models import build_model

    torch.manual_seed(0)
    config = transformers.VideoMAEConfig(num_labels=400)  # ViT-B, 16 frames, 224
    transformers.VideoMAEForVideoClassification(config).save_pretrained(tmp_path / "hub")
    _serve_hub_folder(server, tmp_path / "hub")
    monkeypatch.setenv("ZOO_HOME", str(tmp_path / "zoo_home"))
    monkeypatch.setenv("ZOO_WEIGHTS_MIRROR", server.url)
    cfg = load_config(FINETUNE, ["DATA.NUM_CLASSES", "3"])
    model = build_model(cfg).train()
    from safetensors.torch import load_file

    hub = load_file(str(tmp_path / "hub" / "model.safetensors"))
    assert torch.equal(model.patch_embed.proj.weight,
                       hub["videomae.embeddings.patch_embeddings.projection.weight"])
    assert torch.equal(model.blocks[11].attn.v_bias,
                       hub["videomae.encoder.layer.11.attention.attention.v_bias"])
    assert model.blocks[11].drop_path.p == pytest.approx(0.1)  # MODEL.KWARGS of the config
    x = torch.randn(1, 3, cfg.CONFIG.DATA.CLIP_LEN, 224, 224)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([2]))
    loss.backward()
    assert model.head.weight.shape == (3, 768)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("hf_pooling", [False, True])
def test_a_classifier_of_the_other_pooling_names_the_kwarg(hf_pooling):
    """A bare state dict has no config.json to compare: the keys tell the pooling."""
    state = _hf_model(use_mean_pooling=hf_pooling).state_dict()
    with pytest.raises(ConversionError) as e:
        convert_state_dict(state, "huggingface", "videomae_vit_b", use_mean_pooling=not hf_pooling,
                           **TINY)
    assert "\n" not in str(e.value)
    assert (f"set CONFIG.MODEL.KWARGS ['use_mean_pooling', {hf_pooling}]") in str(e.value)
    convert_state_dict(state, "huggingface", "videomae_vit_b", use_mean_pooling=hf_pooling,
                       **TINY)  # the kwarg it names fits


def test_a_hub_folder_loaded_directly_orders_its_classifier_by_id2label(tmp_path, caplog):
    """config.json's id2label names the classifier's rows: a folder given as MODEL.PRETRAINED
    gets the head a converted file of it gets, its rows in the data's class order;
    transformers' placeholder LABEL_<id> names leave the rows as they are."""
    from zoo.models.weights.load import load_pretrained

    names = ["sit", "run", "jump"]
    hf = _hf_model(num_labels=3, id2label=dict(enumerate(names)),
                   label2id={n: i for i, n in enumerate(names)})
    hf.save_pretrained(tmp_path / "hub")
    out = str(tmp_path / "zoo.pth")
    convert_checkpoint(str(tmp_path / "hub"), out, "huggingface", "videomae_vit_b", dict(TINY))
    want = hf.classifier.weight.detach()

    def head(path, classes):
        model = zoo.create_model("videomae_vit_b", num_classes=3, **TINY)
        load_pretrained(model, path, "videomae_vit_b", dict(TINY), classes)
        return model.head.weight.detach()

    data = ["jump", "run", "sit"]
    with caplog.at_level(logging.INFO):
        direct = head(str(tmp_path / "hub"), data)
    assert torch.equal(direct, want[[2, 1, 0]])
    assert torch.equal(direct, head(out, data))
    assert "its classifier rows reordered to the data's class order" in caplog.text
    assert torch.equal(head(str(tmp_path / "hub"), names), want)
    config = json.loads((tmp_path / "hub" / "config.json").read_text())
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
    (tmp_path / "hub" / "config.json").write_text(json.dumps(config))
    assert torch.equal(head(str(tmp_path / "hub"), data), want)


@pytest.mark.parametrize("key,value,said", [
    ("hidden_act", "relu", "config.json hidden_act is 'relu' but zoo's VideoMAE computes GELU"),
    ("hidden_act", "silu", "config.json hidden_act is 'silu' but zoo's VideoMAE computes GELU"),
    ("layer_norm_eps", 1e-3, "config.json layer_norm_eps is 0.001 but the model has 1e-06; "
                             "build the model to fit (MODEL.KWARGS ['norm_eps', 0.001])"),
    ("intermediate_size", 48, "config.json intermediate_size is 48 but the model has 96; build "
                              "the model to fit (MODEL.KWARGS ['mlp_ratio', 2.0])")])
def test_config_json_of_another_activation_epsilon_or_mlp_is_refused(tmp_path, key, value, said):
    """The activation, the LayerNorm epsilon and the MLP width change the logits with weights
    that fit every shape: each is refused in one line (transformers' 1e-12 epsilon against
    zoo's 1e-6 is the same net)."""
    if key == "intermediate_size":
        _hf_model(mlp_ratio=2).save_pretrained(tmp_path)
    else:  # weights that fit every shape
        _hf_model().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError) as e:
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path), **TINY)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}: ") and said in msg and "\n" not in msg, msg
    config.update(hidden_act="gelu", layer_norm_eps=1e-12, intermediate_size=96)
    (tmp_path / "config.json").write_text(json.dumps(config))
    if key != "intermediate_size":
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path), **TINY)


def test_every_mismatching_config_json_key_is_in_the_one_line(tmp_path):
    _hf_model().save_pretrained(tmp_path)
    model = dict(TINY, embed_dim=48, depth=3, num_heads=4)
    with pytest.raises(ConversionError) as e:
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path), **model)
    msg = str(e.value)
    for key, theirs, ours in (("hidden_size", 24, 48), ("num_hidden_layers", 2, 3),
                              ("num_attention_heads", 3, 4)):
        assert f"config.json {key} is {theirs} but the model has {ours}" in msg, msg
    assert "MODEL.KWARGS ['embed_dim', 24, 'depth', 2, 'num_heads', 3" in msg


def test_pretraining_weights_without_architectures_keep_the_models_pooling(tmp_path, caplog):
    """A pretraining config.json without "architectures" (its weights still hold the decoder):
    its use_mean_pooling is not checked (the head starts fresh whatever it pooled), and the log
    says what loaded and what starts fresh for either pooling."""
    torch.manual_seed(0)
    hf = transformers.VideoMAEForPreTraining(_hf_config(
        use_mean_pooling=False, decoder_hidden_size=16, decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2, decoder_intermediate_size=32))
    hf.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.INFO):
        zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path), **TINY)
    assert "fc_norm and the classifier start fresh" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        model = zoo.create_model("videomae_vit_b", num_classes=CLASSES, pretrained=str(tmp_path),
                                 use_mean_pooling=False, **TINY)
    assert torch.equal(model.norm.weight, hf.videomae.layernorm.weight)
    line = next(r.getMessage() for r in caplog.records if "decoder tensors" in r.getMessage())
    assert "fc_norm" not in line and "its final norm" in line and "the classifier starts fresh" \
        in line, line
