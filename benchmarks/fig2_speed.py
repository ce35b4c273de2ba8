"""Wall time of `bpo reproduce fig2` (compilation included) and its parts.

    python benchmarks/fig2_speed.py [--seeds 100] [--seed-chunk N]

Prints per algorithm: compile time, run time, environment steps per second, and the cost of
BPO-REINFORCE relative to REINFORCE measured in the same process.
"""

import argparse
import tempfile
import time
from pathlib import Path

from bpo.config.presets import get_preset
from bpo.config.schema import replace, with_bpo
from bpo.training import run, summarize, write


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--seed-chunk", type=int, default=None,
                        help="default: 10 on CPU (the runs' own), all seeds at once on a GPU")
    args = parser.parse_args()
    base = replace(get_preset("short_corridor"), seeds=args.seeds)
    start = time.perf_counter()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ("reinforce", "bpo"):
            out = run(with_bpo(base, algo == "bpo"), seed_chunk=args.seed_chunk)
            write(out, Path(tmp) / algo)
            rows[algo] = (out, summarize(out))
    total = time.perf_counter() - start
    chunk = rows["bpo"][0].seed_chunk
    print(f"fig2: {args.seeds} seeds x {base.episodes} episodes per algorithm, seed_chunk={chunk}")
    print(f"{'algo':<10}{'compile s':>10}{'run s':>8}{'env steps':>11}{'steps/s':>10}{'final':>9}")
    for algo, (out, s) in rows.items():
        print(f"{algo:<10}{out.compile_time_s:>10.1f}{out.run_time_s:>8.1f}{s['env_steps']:>11.0f}"
              f"{s['train_steps_per_s']:>10.0f}{s['final_mean']:>9.2f}")
    r, b = rows["reinforce"][0], rows["bpo"][0]
    print(f"BPO / REINFORCE run-time ratio: {b.run_time_s / r.run_time_s:.1f}")
    print(f"total wall time (compile + run + writing results): {total:.1f} s")


if __name__ == "__main__":
    main()
