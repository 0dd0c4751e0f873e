"""The sub-commands of ``zoo-benchmark`` (``tools/benchmark.py``; the parser is in
benchmarks/run.py): each takes the parsed arguments and returns the paths of the files it wrote
(NAME.csv, NAME.json and, where there is a chart, NAME.png).

The startup benchmark times the training command as a child process (``python -m zoo.cli.train``,
what ``zoo-train`` and ``tools/train_ddp.py`` run); the others call library functions.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

from zoo.utils.env import available_cpus

from . import common, plots


def _device(args) -> torch.device:
    if args.device == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(args.device)


def _steady_numbers() -> None:
    """Flush subnormal floats to zero (FTZ/DAZ) in this process.

    The step benchmarks repeat one batch, so after a step or two the loss is ~0 and the float32
    backward pass runs on subnormal gradients, which x86 CPUs compute in microcode: measured on
    the Xeon VM, PyTorchVideo's float32 step went from 3.4 s to 7.3 s and then 143 s at its fifth
    step. Training on fresh batches does not sit there, so timing it would measure the repeated
    batch, not the framework; with FTZ the same steps stay at 2.8-3.5 s. Every variant gets it.
    """
    torch.set_flush_denormal(True)


def _execution(args, device):
    """The GPU step settings the ``_execution_args`` flags ask for (benchmarks/run.py)."""
    from .train import step_execution

    return step_execution(device, args.compile, args.compile_mode, args.stem_pad,
                          args.cudnn_benchmark)


def _finish(args, name, rows, machine, columns, extra=None):
    paths = common.write_results(args.out, name, rows, machine, extra)
    print(common.format_table(rows, columns))
    return paths


def cmd_train(args) -> list:
    from .train import train_throughput

    _steady_numbers()
    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    kwargs = dict(zip(args.kwargs[0::2], [_literal(v) for v in args.kwargs[1::2]]))
    if args.act_checkpoint_memory:
        return _train_memory(args, kwargs, machine, device)
    rows = train_throughput(args.model, args.frames, args.size, args.batch, args.precision,
                            args.memory_format, args.warmup, args.runs, device, args.num_classes,
                            kwargs, args.compile, peak=args.gemm_size >= 0,
                            gemm_size=args.gemm_size or None,
                            execution=_execution(args, device))
    columns = ["precision", "memory_format", "resolved_precision", "channels_last", "input",
               "compile_mode", "stem_pad", "median_s", "clips_per_s", "first_step_s",
               "first_loss"]
    if args.gemm_size >= 0:
        columns += ["math_mode", "achieved_gflops", "peak_gflops", "peak_pct"]
    paths = _finish(args, "train", rows, machine, columns)
    for r in rows if args.gemm_size >= 0 else []:
        print(f"{r['precision']}/{r['memory_format']} ({r['resolved_precision']}): "
              f"{r['median_s']:.4g} s/step, {r['step_gflop']:.4g} GFLOP/step -> "
              f"{r['achieved_gflops']:.4g} GFLOP/s = {r['peak_pct']:.1f}% of a "
              f"{r['peak_gemm_size']}² {r['math_mode']} GEMM "
              f"({r['peak_gflops']:.4g} GFLOP/s)"
              + ("" if r["peak_pct"] <= 100 else ", which ran slower than the step: no peak "
                 "on this device"))
    png = os.path.join(args.out, "train.png")
    plots.bar_chart(png, [f"zoo {r['precision']} / {r['memory_format']}" for r in rows],
                    [r["clips_per_s"] for r in rows],
                    f"{args.model} train step, batch {args.batch}, {args.frames}x{args.size}²",
                    "clips/s (higher is better)", footer=plots.machine_footer(machine))
    return paths + [png]


def _train_memory(args, kwargs, machine, device) -> list:
    from .train_memory import train_step_memory

    rows = train_step_memory(args.model, args.frames, args.size, args.batch,
                             num_classes=args.num_classes, model_kwargs=kwargs,
                             threads=args.threads or available_cpus(), device=str(device))
    columns = ["act_checkpoint", "device", "rss_before_mb", "peak_rss_mb", "step_rise_mb",
               "step_s", "loss"]
    if rows and "peak_cuda_mb" in rows[0]:
        columns += ["cuda_before_mb", "peak_cuda_mb", "step_rise_cuda_mb"]
    return _finish(args, "train_memory", rows, machine, columns)


def cmd_profile(args) -> list:
    from .profile import step_profile

    _steady_numbers()
    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    kwargs = dict(zip(args.kwargs[0::2], [_literal(v) for v in args.kwargs[1::2]]))
    rows, info = step_profile(args.model, args.frames, args.size, args.batch, args.precision,
                              args.memory_format, args.warmup, args.runs, device,
                              args.num_classes, kwargs, _execution(args, device))
    name = f"profile_{info['precision']}"
    paths = common.write_results(args.out, name, rows, machine, info)
    print(f"{args.model}, batch {args.batch}, {args.frames}x{args.size}², {info['precision']}"
          f"{' + channels-last' if info['channels_last'] else ''}, {info['input']} input, "
          f"{info['threads']} threads: "
          f"{info['step_ms']:.1f} ms per profiled step, operators' self time "
          f"{info['self_ms_per_step']:.1f} ms")
    print(common.format_table([{"category": c, "ms_per_step": ms,
                                "percent": round(100 * ms / info["self_ms_per_step"], 1)}
                               for c, ms in info["categories"].items()],
                              ["category", "ms_per_step", "percent"]))
    print(common.format_table(rows[:args.top], ["operator", "category", "ms_per_step", "percent",
                                                "calls_per_step"]))
    return paths


def cmd_stems(args) -> list:
    from .stems import stem_rows

    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    rows = stem_rows(args.model, args.frames, args.size, args.batch, device, args.warmup,
                     args.runs)
    return _finish(args, "stems", rows, machine,
                   ["stem", "input", "kernel", "out_channels", "way", "dtype", "ms",
                    "speedup_vs_padded_3d", "max_rel_diff"])


def cmd_compare(args) -> list:
    from .compare import compare_pytorchvideo

    _steady_numbers()
    device = _device(args)
    torch.set_num_threads(args.threads or available_cpus())
    machine = common.machine_info(device)
    rows, ratios = compare_pytorchvideo(args.frames, args.size, args.batch, args.width,
                                        args.num_classes, args.warmup, args.runs, device,
                                        ablation=not args.no_ablation,
                                        execution=_execution(args, device),
                                        bf16_only=args.bf16_only)
    against = "ptv_bf16" if args.bf16_only else "ptv_fp32"
    paths = _finish(args, "compare", rows, machine, ["variant", "precision", "channels_last",
                    "input", "median_s", "clips_per_s", f"speedup_vs_{against}", "first_loss",
                    f"loss_rel_diff_vs_{against}"], {"ratios": ratios})
    if not args.bf16_only:
        _print_fp32_ratios(ratios)
    print(f"zoo bf16 + channels-last / PyTorchVideo bf16 + channels-last: "
          f"{ratios['zoo_bf16_vs_ptv_bf16']:.2f}x (median of the per-round ratios "
          f"{ratios['zoo_bf16_vs_ptv_bf16_paired']:.2f}x; loss relative difference "
          f"{ratios['loss_rel_diff_bf16_vs_ptv_bf16']:.2g})")
    if "zoo_fp32_stems_vs_bf16_stems" in ratios:
        print(f"zoo's bf16 step with its float32 RGB stems / with the stems in bf16: "
              f"{ratios['zoo_fp32_stems_vs_bf16_stems']:.2f}x (median of the per-round ratios "
              f"{ratios['zoo_fp32_stems_vs_bf16_stems_paired']:.2f}x)")
    png = os.path.join(args.out, "compare.png")
    plots.bar_chart(png, [r["variant"] for r in rows], [r["clips_per_s"] for r in rows],
                    "SlowFast-R50 8x8 train step (forward + backward + SGD step)\n"
                    f"batch {args.batch}, {args.frames}x{args.size}², "
                    f"{torch.get_num_threads()} threads, same process, same weights",
                    "clips/s (higher is better)",
                    notes=[f"{r[f'speedup_vs_{against}']:.2f}x" for r in rows],
                    footer=plots.machine_footer(machine))
    return paths + [png]


def _print_fp32_ratios(ratios) -> None:
    print(f"zoo fp32 / PyTorchVideo fp32: {ratios['zoo_fp32_vs_ptv_fp32']:.2f}x (loss relative "
          f"difference {ratios['loss_rel_diff_fp32']:.2g})")
    print(f"zoo defaults ({ratios['zoo_defaults_precision']}) / PyTorchVideo defaults (fp32): "
          f"{ratios['zoo_defaults_vs_ptv_defaults']:.2f}x (loss relative difference "
          f"{ratios['loss_rel_diff_defaults']:.2g})")
    print(f"zoo defaults / PyTorchVideo with the same settings: "
          f"{ratios['zoo_defaults_vs_ptv_same_settings']:.2f}x")


def cmd_scaling(args) -> list:
    from .scaling import scaling_throughput

    if args.nodes == 2:
        return _scaling_two_nodes(args)
    device = _device(args)
    machine = common.machine_info(device)
    rows = scaling_throughput(args.config_file, args.opts, args.procs, args.threads_per_proc,
                              args.steps, args.warmup, args.repeats, args.extra_modules)
    paths = _finish(args, "scaling", rows, machine, ["processes", "threads_per_proc",
                    "precision", "batch_per_proc", "clips_per_s", "speedup", "efficiency",
                    "clips_per_s_all_runs"], {"config_file": os.path.relpath(args.config_file),
                                              "opts": list(args.opts)})
    png = os.path.join(args.out, "scaling.png")
    threads = rows[0]["threads_per_proc"]
    what = "GPUs" if device.type == "cuda" else f"CPU processes x {threads} thread(s)"
    plots.scaling_chart(png, [r["processes"] for r in rows], [r["clips_per_s"] for r in rows],
                        [r["efficiency"] for r in rows], "clips/s",
                        f"{os.path.basename(args.config_file)}: {what}",
                        footer=plots.machine_footer(machine))
    return paths + [png]


def _scaling_two_nodes(args) -> list:
    from .link import LinkError
    from .scaling_nodes import two_node_scaling

    machine = common.machine_info(torch.device("cpu"))
    try:
        rows = two_node_scaling(args.config_file, args.opts, args.compression,
                                args.threads_per_proc, args.steps, args.warmup, args.repeats,
                                args.link_rate, args.link_delay_ms, args.extra_modules,
                                args.bucket_cap_mb)
    except LinkError as e:
        sys.exit(f"error: {e}")
    link = rows[0]
    print(f"link: {link['link_rate']}, {link['link_delay_ms']} ms one way, measured "
          f"{link['link_measured_mb_per_s']} MB/s per TCP stream"
          + (f"; {link['link_note']}" if link["link_note"] else ""))
    paths = _finish(args, "scaling_nodes", rows, machine, [
        "nodes", "compression", "bucket_cap_mb", "threads_per_proc", "batch_per_proc",
        "clips_per_s", "s_per_step", "thread_cpu_s_per_step",
        "efficiency", "of_ceiling", "last_loss", "loss_vs_none", "clips_per_s_all_runs"],
        {"config_file": os.path.relpath(args.config_file), "opts": list(args.opts)})
    ceiling, trained = rows[1], rows[2:]
    best = max(trained, key=lambda r: r["efficiency"])
    print(f"best two-node setting: GRAD_COMPRESSION {best['compression']}, BUCKET_CAP_MB "
          f"{best['bucket_cap_mb']:g}, "
          f"{best['efficiency'] * 100:.0f}% scaling efficiency; two independent one-node jobs "
          f"side by side (nothing sent) reach {ceiling['efficiency'] * 100:.0f}% on this machine "
          f"(the best setting reaches {best['of_ceiling'] * 100:.0f}% of that)")
    return paths


def _generated_list(args) -> list:
    """Overrides that train on ``--generate`` N 340x256 videos with keyframes every ``--gop``
    frames (made once under ``--out``)."""
    from . import data

    folder = os.path.join(args.out, f"videos_340x256_gop{args.gop}_{args.generate}")
    list_path = data.generate(folder, args.generate, args.gop)
    return ["DATA.SYNTHETIC.ENABLE", "False", "DATA.TRAIN_ANNO_PATH", list_path,
            "DATA.TRAIN_DATA_PATH", folder, "DATA.NUM_CLASSES", "1"]


def cmd_data(args) -> list:
    from zoo.cli.configure import with_extra_modules
    from zoo.config import load_config
    from zoo.utils.env import import_extra_modules

    from .loader import loader_throughput, median_rows

    machine = common.machine_info(torch.device("cpu"))
    opts = (_generated_list(args) if args.generate else []) + list(args.opts)
    cfg = with_extra_modules(load_config(args.config_file, opts), args.extra_modules)
    import_extra_modules(cfg.CONFIG.EXTRA_MODULES)
    rows = loader_throughput(cfg, args.workers, args.batches, args.warmup, args.split,
                             args.clips_per_video, args.rounds, args.clips_window,
                             args.batch_buffers, args.decode_threads, args.resize_on)
    summary = median_rows(rows)
    extra = {"config_file": os.path.relpath(args.config_file), "opts": opts, "summary": summary}
    if args.decoders is not None:
        extra["decoders"] = _decoder_benchmark(args.decoders)
    paths = _finish(args, "data", rows, machine, ["split", "num_workers", "clips_per_video",
                    "clips_window", "batch_buffers", "decode_threads", "resize_on", "round",
                    "batch", "clip_shape", "clips_per_s", "clips_per_s_per_worker",
                    "clips_per_cpu_s", "skipped_videos"], extra)
    print(common.format_table(summary, ["num_workers", "clips_per_video", "clips_window",
                                        "batch_buffers", "decode_threads", "resize_on",
                                        "median_clips_per_s", "per_worker", "clips_per_cpu_s",
                                        "rounds", "vs_1_clip"]))
    png = os.path.join(args.out, "data.png")
    plots.bar_chart(png, [f"{r['num_workers']} workers, {r['clips_per_video']} clips/video "
                          f"{r['clips_window']}, {r['batch_buffers']} buffers, decode threads "
                          f"{r['decode_threads']}, resize on {r['resize_on']}" for r in summary],
                    [r["median_clips_per_s"] for r in summary],
                    f"{os.path.basename(args.config_file)}: {args.split} loader",
                    "clips/s (higher is better)", footer=plots.machine_footer(machine))
    return paths + [png]


def _decoder_benchmark(decoders) -> dict:
    """Decoding speed per decoder on 8 generated videos (what ``zoo-benchmark-data --generate 8
    --seconds 6 --rounds 2`` measures: clips of 32 frames, stride 2, one worker each).

    Args:
        decoders: Decoder names (``benchmarks.data.DECODERS``); those not installed are left
            out.
    """
    from . import data

    names = [d for d in decoders if data.available(d)]
    with tempfile.TemporaryDirectory(prefix="zoo_decoders_") as tmp:
        list_path = data.generate(tmp, 8, 16)
        results = data.decoder_throughput(list_path, tmp, names, 32, 2, 6.0, 5, 2)
    print(f"32 frames x stride 2 per clip, one worker, {len(names)} decoders")
    print("\n".join(data.clips_table(results)))
    return {"clips": results}


def cmd_startup(args) -> list:
    from .startup import time_to_first_iteration

    machine = common.machine_info(torch.device("cpu"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo_startup_") as tmp:
        cache = args.cache or os.path.join(tmp, "cache")
        modules = ["--extra-modules", *args.extra_modules] if args.extra_modules else []
        cmd = [sys.executable, "-m", "zoo.cli.train", "--config-file", args.config_file,
               *modules, *args.opts, "LOG.BASE_PATH", os.path.join(tmp, "out"),
               "DATA.SYNTHETIC.ROOT", cache]
        for run in range(args.runs):
            r = time_to_first_iteration(cmd, args.timeout)
            r["data"] = "generated in this run" if r["data_generated"] else "cached"
            r["run"] = run + 1
            rows.append(r)
    paths = _finish(args, "startup", rows, machine, ["run", "data", "seconds", "logged_s"],
                    {"command": "python -m zoo.cli.train (= tools/train_ddp.py) --config-file "
                     f"{os.path.relpath(args.config_file)} {' '.join(args.opts)}".strip()})
    return paths


def cmd_gpu(args) -> list:
    """The GPU check (benchmarks/gpu_check.py); ``args.table`` and ``args.failed`` tell
    ``main`` what to print last and how to exit."""
    import time

    from .gpu_check import markdown_table, run_gpu_check

    out = args.out or os.path.join("output", "gpu_check", time.strftime("%Y%m%d-%H%M%S"))
    rows = run_gpu_check(out, args.device, args.quick, args.steps, args.step_timeout,
                         args.budget)
    args.table = markdown_table(rows)
    args.failed = any(r["status"] == "FAILED" for r in rows)
    return sorted(os.path.join(out, name) for name in os.listdir(out)
                  if name.endswith((".log", ".json", ".txt")))


def _literal(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(value, value)
