"""The JAX runner: a ``Program`` of every seed, one compiled call per loop iteration.

Every JAX run goes through here, checkpointed or not, so the same config, seeds and seed chunk give
bit-identical results whichever command runs them (``bpo train`` with or without
``--checkpoint-every N``, for any N, ``bpo sweep``, ``bpo reproduce``) and whether or not the run
was interrupted and resumed: the same compiled iteration runs the same number of times. The
single-program form (``bpo.training.make_train``, PureJaxRL's ``train(key)``) compiles the loop as
one ``lax.scan``; XLA optimises that program differently, so its results agree to float rounding,
not bitwise.

Seeds are vmapped in chunks of ``seed_chunk`` that run one after another inside the program
(``bpo.runners.seeds.chunked_seed_map``). On a CPU the seeds are split into shards of whole
chunks, one per core (``bpo.infra.runtime.cpu_threads``), and the shards' iterations run side by side in
threads (XLA releases the interpreter while a program runs). Each seed's computations are the same
whichever shard holds it, so the results do not depend on the number of threads
(``tests/test_segments.py``). The driver (``bpo.training.driver``) owns the loop, checkpoints,
signals and the non-finite check; this class only initialises, runs one iteration, snapshots and
restores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np

from bpo.infra import memory, runtime
from bpo.runners.program import Program
from bpo.runners.seeds import chunked_seed_map


def shard_bounds(n_seeds: int, chunk: int, threads: int) -> list[tuple[int, int]]:
    """Seed ranges ``[start, stop)`` trained side by side, at most one per thread: whole chunks each,
    as even as they can be, the seeds after the last whole chunk in the last shard."""
    n_chunks = n_seeds // chunk
    k = max(1, min(threads, n_chunks))
    bounds, start = [], 0
    for i in range(k):
        stop = n_seeds if i == k - 1 else start + (n_chunks // k + (i < n_chunks % k)) * chunk
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_size(seed_chunk: int, seeds: int) -> int:
    """The seeds vmapped together for ``seed_chunk`` (0: all of them)."""
    return seeds if seed_chunk <= 0 else min(seed_chunk, seeds)


def _seed_slice(tree, start: int, stop: int):
    return jax.tree.map(lambda x: x[start:stop], tree)


def _concat(trees, axis: int = 0):
    return trees[0] if len(trees) == 1 else jax.tree.map(lambda *xs: np.concatenate(xs, axis=axis), *trees)


class JaxRunner:
    """All seeds of one config (or of several rows, ``hp_per_seed``) as one ``Program``, run one
    compiled loop iteration at a time; ``progress(step, eval_return)`` is told each seed's
    evaluations from the host after the iteration that made them (``Program.reported``). With
    ``hp_per_seed`` every leaf of ``hp`` has the seed axis too (rows of hyperparameters vmapped
    like seeds, ``bpo.training.rows``)."""

    iteration_name = "loop iteration"

    def __init__(self, cfg, program: Program, hp, keys, seed_chunk: int, progress: Callable | None = None,
                 hp_per_seed: bool = False):
        self.cfg, self.hp, self.keys, self.seed_chunk, self.hp_per_seed = cfg, hp, keys, seed_chunk, hp_per_seed
        self.chunk = chunk_size(seed_chunk, cfg.seeds)
        on_cpu = jax.default_backend() == "cpu"
        self.shards = shard_bounds(cfg.seeds, self.chunk, runtime.cpu_threads() if on_cpu else 1)
        self.program, self.progress = program, progress
        self.unit, self.n_iterations = cfg.unit, self.program.n_iterations
        self.backend, self.threads = jax.default_backend(), len(self.shards)
        if getattr(cfg, "backend", "jax") == "threads":  # the physics runs on the host whatever the device
            self.backend = f"threads+{self.backend}"
        self.eval_time_s = self.eval_worker_time_s = self.compile_time_s = 0.0
        self.checkpoint_info = {"seed_chunk": seed_chunk}
        self._shard_hp = [_seed_slice(hp, a, b) if hp_per_seed else hp for a, b in self.shards]
        self._index = np.zeros(1, np.int32)
        self._carries, self._pieces = [], []
        self._pool = ThreadPoolExecutor(len(self.shards)) if len(self.shards) > 1 else None

    def _map_seeds(self, fn, carry_or_keys, hp):
        """``fn(x, hp)`` over the seed axis, in chunks; ``hp`` carries the seed axis with ``hp_per_seed``."""
        if self.hp_per_seed:
            return chunked_seed_map(lambda xh: fn(*xh), (carry_or_keys, hp), self.chunk)
        return chunked_seed_map(lambda x: fn(x, hp), carry_or_keys, self.chunk)

    def _init_all(self, keys, hp):
        return self._map_seeds(self.program.init, keys, hp)

    def _iteration_all(self, carry, hp, idx):
        return self._map_seeds(lambda c, h: self.program.segment(c, h, idx), carry, hp)

    def compile(self) -> None:
        """One program per distinct shard size, compiled ahead (timed apart from training), once
        the traced shapes show that the run fits in memory (``bpo.infra.memory``)."""
        start = time.perf_counter()
        self._init = jax.jit(self._init_all)
        iteration = jax.jit(self._iteration_all)
        traced, sizes = {}, []
        for (a, b), h in zip(self.shards, self._shard_hp, strict=True):
            if b - a not in traced:
                shape = jax.eval_shape(self._init, self.keys[a:b], h)
                traced[b - a] = (iteration.trace(shape, h, self._index), memory.nbytes(shape))
            program, state_bytes = traced[b - a]
            sizes.append((state_bytes, memory.nbytes(program.out_info[1])))
        memory.check_run_fits(self.cfg, sum(s for s, _ in sizes), sum(o for _, o in sizes), self.n_iterations)
        self._programs = {size: program.lower().compile() for size, (program, _) in traced.items()}
        self._iteration = iteration
        self.compile_time_s = time.perf_counter() - start

    def init(self) -> None:
        self._carries = [self._init(self.keys[a:b], h) for (a, b), h in zip(self.shards, self._shard_hp, strict=True)]
        self._pieces = []

    def template(self, done: int):
        """The shapes of a checkpoint's state after ``done`` iterations: the carry of every seed and
        ``done`` iterations' outputs, which ``snapshot`` joins on axis 1 (traced only when resuming:
        an MJX iteration takes long)."""
        full_shape = jax.eval_shape(self._init, self.keys, self.hp)
        one = jax.eval_shape(self._iteration, full_shape, self.hp, self._index)[1]
        grown = lambda x: jax.ShapeDtypeStruct((x.shape[0], done * x.shape[1], *x.shape[2:]), x.dtype)  # noqa: E731
        return {"carry": full_shape, "outputs": jax.tree.map(grown, one)}

    def extra_problem(self, extra: dict, done: int) -> str | None:
        """None: a JAX run keeps all its progress in its state (``snapshot``), which ``template`` checks."""
        del extra, done
        return None

    def restore(self, saved, extra: dict) -> None:
        self._carries = [_seed_slice(saved["carry"], a, b) for a, b in self.shards]
        self._pieces = [saved["outputs"]]

    def _iterate_shard(self, i: int, done: int):
        a, b = self.shards[i]
        new_carry, outputs = self._programs[b - a](self._carries[i], self._shard_hp[i], self._index + done)
        return new_carry, jax.tree.map(np.asarray, outputs)

    def iterate(self, done: int) -> tuple[dict, int]:
        """Loop iteration ``done`` of every shard; returns its training metrics per unit and the
        first unit it trained."""
        if self._pool is None:
            results = [self._iterate_shard(0, done)]
        else:
            results = list(self._pool.map(lambda i: self._iterate_shard(i, done), range(len(self.shards))))
        self._carries = [carry for carry, _ in results]
        outputs = _concat([out for _, out in results])
        self._pieces.append(outputs)
        if self.progress is not None:
            for step, eval_return in self.program.reported(outputs):
                self.progress(step, eval_return)
        return self.program.unit_metrics(outputs[1], done), self.program.first_unit(done)

    def snapshot(self, done: int) -> tuple[dict, dict, object]:
        """(state to save, extra, the part to check for non-finite values): the carry of all seeds
        on the host and the outputs so far (skipped evaluations are NaN, so only the carry is checked)."""
        carry = _concat([jax.tree.map(np.asarray, c) for c in self._carries])
        self._pieces = [_concat(self._pieces, axis=1)]
        return {"carry": carry, "outputs": self._pieces[0]}, {}, carry

    def evaluations_done(self, done: int) -> int:
        """Evaluations of each seed in the first ``done`` loop iterations."""
        return self.program.evaluations_in(done)

    def policies(self) -> dict:
        """The policies of every seed now (``Program.policies``), on the host."""
        return _concat([jax.tree.map(np.asarray, self.program.policies(c)) for c in self._carries])

    def finish(self) -> dict:
        outputs = _concat(self._pieces, axis=1)
        carry = self._carries[0] if len(self._carries) == 1 else _concat(
            [jax.tree.map(np.asarray, c) for c in self._carries])
        finish_all = jax.jit(lambda c, o: chunked_seed_map(lambda co: self.program.finish(*co), (c, o), self.chunk))
        return jax.block_until_ready(finish_all(carry, outputs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
