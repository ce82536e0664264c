"""What recording costs a training loop: step time with and without ``vault.write(block=False)``.

A jitted, donated training-like step (add one timestep of 16 Atari-sized frames to a
trajectory buffer, sample 32 frames, one SGD step of a 2-layer MLP on them), timed step by
step. A recording loop also calls ``vault.write(state, block=False)`` every K steps. The frames
are the image workload of ``tools/bench_vault.py`` (``make_frame_pool`` and ``DataSource`` of
``tools/_workloads.py``: each row walks through the consecutive Atari-like frames of one game
from its own offset), so the vault compresses them as it would real frames (zstd-3 about 14x)
at the speed it would. The loops themselves are in ``tools/_recording.py``.

This machine is shared, and other work comes and goes on a scale of seconds, so the loops run
side by side in one process and take turns in blocks of N steps (a multiple of K): a plain
loop, then per round and codec the recording loop of that codec followed by the plain loop
(codecs A, B: plain, A, plain, B, plain, A, ...). Each loop keeps its own buffer, parameters
and vault across its blocks, so a recording loop is in the steady state of a long run; its
writes fall mid-way between block ends (at steps K/2, 3K/2, ...), so the background work of a
block's last write ends within the block (the wait for it at the block's end is reported and
should be ~0). The jitted step is compiled once; each loop first runs K untimed steps.
Reported per codec, over all its blocks' step times against all plain blocks' step times:
median, mean and p99 step time and their ratios (> 1: recording is slower), the per-round
median ratios (a recording block against the mean of the plain blocks on either side), the
final flush (at the end, the steps since the last write are written with ``block=False`` and
``close()`` is timed: what ending a run costs), the compression ratio on disk, and where the
recording's cost lands: the mean recorded and unrecorded step time by how many steps have run
since the last write, and the share of the mean's excess at each (``by_steps_since_write``).
Targets (the default codec): median ratio <= 1.10, mean ratio <= 1.05, and p99 ratio (the
slowest 1 % of recorded steps against the slowest 1 % of unrecorded ones) <= 1.5.

The floor recorders (``--codec floor-zstd``, ``--codec floor-raw``; ``tools/_floor.py``) do
the least any persistent recorder of this loop must: copy the new timesteps out of the buffer
on the loop's thread, then on one background thread compress them with zstd-3 (or not), write
them to plain files and ``fsync`` them. Run beside a vault codec, the table also gives the
vault's step times against each floor's: what the vault's design costs beyond recording
itself; the floor's own ratios are what recording these frames costs on this machine.

Usage::

    python tools/bench_recording.py --codec auto --codec lz4 --out results.json
    python tools/bench_recording.py --codec auto --codec floor-zstd --codec floor-raw
    python tools/bench_recording.py --quick          # small smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from _argtypes import at_least, out_file, positive_int
from _recording import DEFAULTS, FLOORS, measure
from _report import log

QUICK = {"rounds": 1, "steps": 200, "every": 100, "time_axis": 400}


def table(result: dict[str, Any]) -> list[str]:
    header = (
        "| run | median ms/step | mean ms/step | p99 ms | median ratio | mean ratio | "
        "p99 ratio | median ratio by round | final flush s | compression |"
    )
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    lines.append(_row("no recording", result["without"]))
    for codec, r in result["with"].items():
        name = f"floor recorder, {codec}" if codec in FLOORS else f"recording, codec {codec}"
        lines.append(_row(name, r))
    against = [(c, f, x) for c, r in result["with"].items() for f, x in r["against_floor"].items()]
    if against:
        lines += [
            "",
            "Against the floor recorders of the same run (> 1: slower than the floor):",
            "",
        ]
        lines.append("| recorder | floor | median ratio | mean ratio | p99 ratio |")
        lines.append("|---|---|---:|---:|---:|")
        for codec, floor, x in against:
            lines.append(
                f"| {codec} | {floor} | {x['median']:.3f} | {x['mean']:.3f} | {x['p99']:.2f} |"
            )
    lines += ["", "Where the recording's cost lands, by steps since the last write:", ""]
    lines.append(
        "| codec | steps since the write | steps | recorded ms | unrecorded ms | share of excess |"
    )
    lines.append("|---|---|---:|---:|---:|---:|")
    for codec, r in result["with"].items():
        for p in r["by_steps_since_write"]:
            lines.append(
                f"| {codec} | {p['steps_since_write']} | {p['steps']} | {p['recorded_ms']:.2f} | "
                f"{p['unrecorded_ms']:.2f} | {p['excess_share'] * 100:.0f} % |"
            )
    return lines


def _row(name: str, r: dict[str, Any]) -> str:
    def opt(key: str, spec: str, suffix: str = "") -> str:
        return "" if key not in r else f"{r[key]:{spec}}{suffix}"

    rounds = ", ".join(f"{x:.3f}" for x in r.get("round_median_ratios", []))
    return (
        f"| {name} | {r['median_ms']:.2f} | {r['mean_ms']:.2f} | {r['p99_ms']:.2f} | "
        f"{opt('median_ratio', '.3f')} | {opt('mean_ratio', '.3f')} | {opt('p99_ratio', '.2f')} | "
        f"{rounds} | "
        f"{opt('final_flush_s', '.2f')} | {opt('compression_ratio', '.1f', 'x')} |"
    )


CODECS = ("auto", "zstd", "lz4", "blosc", "gzip", *FLOORS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=positive_int, default=None, help="recording blocks per codec (6)"
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="timed steps per block, a multiple of --every (500)",
    )
    parser.add_argument(
        "--every", type=at_least(2), default=None, help="steps between writes (250)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"1 round of {QUICK['steps']} timed steps after {QUICK['every']} untimed, "
        f"write every {QUICK['every']}",
    )
    parser.add_argument("--out", type=out_file, default=None, help="write the JSON here")
    parser.add_argument(
        "--codec",
        action="append",
        choices=CODECS,
        default=None,
        help=f"vault codec ({', '.join(CODECS[: -len(FLOORS)])}) or a floor recorder "
        f"({', '.join(FLOORS)}: tools/_floor.py); repeat to compare (default: auto)",
    )
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else DEFAULTS)
    for key in ("rounds", "steps", "every"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["steps"] % cfg["every"]:
        parser.error(
            f"--steps ({cfg['steps']}) must be a multiple of --every ({cfg['every']}): "
            "each timed block holds whole write intervals"
        )
    if cfg["every"] > cfg["time_axis"]:
        parser.error(
            f"--every ({cfg['every']}) must be at most the buffer's time axis "
            f"({cfg['time_axis']}{' with --quick' if args.quick else ''})"
        )
    if args.codec is not None and len(set(args.codec)) != len(args.codec):
        parser.error(f"--codec names a codec twice: {args.codec}")
    codecs = tuple(args.codec or ["auto"])
    result = measure(cfg["rounds"], cfg["steps"], cfg["every"], cfg["time_axis"], codecs, log=log)
    result["command"] = " ".join(["python", "tools/bench_recording.py", *(argv or sys.argv[1:])])
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    print()
    print("\n".join(table(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
