"""convert's plan carried split by split (the driver holds no record sizes, issue 32) equals the placement rule over
the whole listing at once (commitlog_layout.layout_reference): every record's new offset, the new segments (first
record, count, BLANK), the ids that change; and the transaction ends' half records mapped split by split from the
places the plan hands each task (convert.transactions) equal the whole listing's map."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings as hsettings, strategies as st

from jobs.pipeline.convert.plan import make_plan
from jobs.pipeline.scan.split_records import SplitRecords
from jobs.pipeline.convert.transactions import ends_tasks, map_ends
from storage_format.commitlog_layout import layout_reference
from storage_format.scan_plan import Segment

HEADER = 48


def _splits(sizes: list[int], cuts: list[int], first: int, ends: list[int]) -> list[SplitRecords]:
    """The listing cut into splits at `cuts`; `ends`: records that are transaction ends, each pointing at the record
    `ends[i] // 2` before it (or at a record outside the log when that is negative)."""
    sizes_a = np.asarray(sizes, np.int32)
    olds = first + np.concatenate(([0], np.cumsum(sizes_a.astype(np.int64) + HEADER)[:-1]))
    bounds = sorted({0, len(sizes), *[c for c in cuts if 0 < c < len(sizes)]})
    out = []
    for a, b in zip(bounds, bounds[1:]):
        mine = [e for e in ends if a <= e < b]
        targets = [int(olds[e - 1 - e // 2]) if e - 1 - e // 2 >= 0 else 7 for e in mine]
        trans = np.zeros(b - a, np.int8)
        preps = np.zeros(b - a, np.int64)
        trans[np.asarray(mine, int) - a], preps[np.asarray(mine, int) - a] = 8, targets
        out.append(SplitRecords.listed(int(olds[a]), HEADER, sizes_a[a:b].copy(), trans, preps, split=len(out)))
    return out


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=120), st.lists(st.integers(0, 120), max_size=12),
       st.sampled_from([320, 512, 1000, 4096]), st.lists(st.integers(0, 119), max_size=6))
def test_the_plan_carried_split_by_split_equals_the_whole_layout(sizes, cuts, segment_size, ends):
    sizes = [min(s, segment_size - 8) for s in sizes]
    ends = sorted({e for e in ends if e < len(sizes)})
    start = 2 * segment_size
    first = start + HEADER
    splits = _splits(sizes, cuts, first, ends)
    data = (Segment(path="d", start=start, size=1 << 40, header=HEADER),)
    loads = []
    plan = make_plan(list(data), splits, segment_size, lambda r: loads.append(r.first) or r.sizes)
    ref = layout_reference(np.asarray(sizes, np.int64), segment_size, start)
    olds = np.concatenate([r.offsets for r in splits])
    news = np.concatenate([p.offsets(p.records.sizes, segment_size)[1] for p in plan.splits])
    assert news.tolist() == ref.offsets.tolist() and plan.end == ref.end and plan.records == len(sizes)
    assert plan.segment_starts == ref.segment_starts and plan.blanks == len(ref.blanks)
    seg_of = (ref.offsets - start) // segment_size
    for s in plan.segments:
        k = (s.start - start) // segment_size
        idx = np.flatnonzero(seg_of == k)
        assert (s.first_index, s.first_old) == (int(idx[0]), int(olds[idx[0]]))
        blank = [int(b) for b in ref.blanks if (b - start) // segment_size == k]
        assert s.blank_at == (blank[0] if blank else None)
    tasks = plan.segment_tasks("out", "map")
    assert sum(t.count for t in tasks) == len(sizes)
    assert plan.ids_changed == int(np.count_nonzero(olds != ref.offsets))
    assert len(loads) <= len(plan.segments) + 2  # sizes read only where a roll needs them
    moved = {int(o): int(n) for o, n in zip(olds, ref.offsets) if o != n}
    pairs, outside = {}, 0
    for t in ends_tasks(plan, None):
        keys, values, out = map_ends(t.records.end_prepared, t.places, segment_size, start, lambda r: r.sizes)
        assert keys.tolist() == sorted(set(keys.tolist()))
        pairs.update(zip(keys.tolist(), values.tolist()))
        outside += out
    targets = [int(t) for r in splits for t in r.end_prepared.tolist()]
    assert pairs == {t: moved[t] for t in targets if t in moved}
    assert outside == sum(1 for t in targets if t not in set(olds.tolist()) and t >= start)
    for i in range(0, len(sizes), 7):
        assert plan.new_offset(int(olds[i])) == int(ref.offsets[i])
        assert plan.records_after(int(olds[i])) == len(sizes) - i - 1


def test_the_plan_counts_only_what_moves(spark, tmp_path, capsys):
    """An upgraded store's plain segments are copied unchanged: the dry run's schedule, half and op-half messages
    "moved" are the DLedger part's only, none of the plain part's, i.e. the whole store's count less the plain
    part's (inspect of each); pending transactions are
    the whole store's."""
    import json
    import shutil

    from jobs.convert import main as convert_main
    from jobs.pipeline.convert.plan import HALF_TOPIC, OP_TOPIC
    from jobs.inspect import main as inspect_main
    from storage_format.record import SCHEDULE_TOPIC
    from tests.conftest import GOLDEN

    case = GOLDEN / "dledger-upgrade-11"
    plain = tmp_path / "plain"
    shutil.copytree(case / "commitlog", plain / "commitlog")
    (tmp_path / "plain.conf").write_text("".join(line for line in (case / "broker.conf").read_text().splitlines(True)
                                                 if "dleger" not in line.lower()))

    def per_topic(argv: list[str]) -> dict[str, int]:
        assert inspect_main(argv + ["--json", "--quiet", "--engine", "local"]) == 0
        queues = json.loads(capsys.readouterr().out)["records_per_topic_queue"]
        return {t: sum(queues.get(t, {}).values()) for t in (SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC)}

    whole = per_topic(["--store", str(case), "--broker-config", str(case / "broker.conf")])
    kept = per_topic(["--store", str(plain), "--broker-config", str(tmp_path / "plain.conf")])
    assert all(kept.values())  # the plain part holds some of each
    assert convert_main(["--store", str(case), "--broker-config", str(case / "broker.conf"), "--out",
                         str(tmp_path / "out"), "--dry-run", "--json", "--quiet"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["schedule_messages_moved"], plan["half_messages_moved"], plan["op_half_messages_moved"]) == \
        tuple(whole[t] - kept[t] for t in (SCHEDULE_TOPIC, HALF_TOPIC, OP_TOPIC)) == (113, 59, 49)
    assert plan["pending_transactions_at_most"] == whole[HALF_TOPIC] - whole[OP_TOPIC] == 22  # the whole store's
