"""Where the bench's synthetic stores live and how they are made: one directory per distinct spec under the bench
root, written (untimed) only when no matching store is there."""
from __future__ import annotations

import shutil
from pathlib import Path

from storegen.synth import StoreSpec, store_matches, write_bench_store

_DEFAULT = StoreSpec()


def store_dir(root: Path, spec: StoreSpec) -> Path:
    """One directory per distinct store, so stores of several sizes and shapes can sit side by side (the
    bench store's default shape keeps its short name)."""
    lmq = f"-lmq{spec.lmq_share:g}x{spec.lmq_queues}" if spec.lmq_share > 0 else ""
    kind = "-dledger" if spec.dledger else ""
    tx = f"-tx{spec.transaction_share:g}" if spec.transaction_share > 0 else ""
    body = f"-body{spec.body_min}-{spec.body_max}" if (spec.body_min, spec.body_max) != (_DEFAULT.body_min,
                                                                                         _DEFAULT.body_max) else ""
    queues = f"-q{spec.topics}x{spec.queues}" if (spec.topics, spec.queues) != (_DEFAULT.topics, _DEFAULT.queues) \
        else ""
    return root / f"store-{spec.messages}msg-{spec.segment_size >> 20}mib-seed{spec.seed}{lmq}{kind}{tx}{body}{queues}"


def ensure_store(root: Path, spec: StoreSpec, regenerate: bool) -> Path:
    """The store the spec describes, written first (untimed) unless a matching one is there."""
    store = store_dir(root, spec)
    if regenerate or not store_matches(store, spec):
        shutil.rmtree(store, ignore_errors=True)
        print(f"[bench] writing the synthetic store {store} (not timed) ...", flush=True)
        write_bench_store(store, spec)
    return store
