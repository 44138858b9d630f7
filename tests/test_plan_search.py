"""nnmem plan's searches (--find-depth, --find-batch): the answer of planning every candidate,
found in a few probes, each step planned once; and the search they use, largest_within."""

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nnmem.cli import main
from nnmem.cli import plan as plan_command
from nnmem.models import create_model
from nnmem.planning import plan
from nnmem.search import largest_within

# -- largest_within: the end of the prefix within a limit, in few probes ------------------------


def search(sizes, limit):
    """largest_within over the indices of `sizes`, and the indices it probed, in order."""
    probed = []

    def size_of(index):
        probed.append(index)
        return sizes[index]

    return largest_within(size_of, range(len(sizes)), limit), probed


def end_of_prefix(sizes, limit):
    """The reference: every candidate checked, the last of those within `limit` from the first
    on (None if the first is not)."""
    within = [i for i, _ in enumerate(sizes) if all(s <= limit for s in sizes[: i + 1])]
    return within[-1] if within else None


growing_sizes = st.lists(st.integers(0, 10**6), max_size=300).map(sorted)


@given(growing_sizes, st.integers(0, 10**6), st.integers(0, 20))
def test_largest_within_is_the_end_of_the_prefix_probing_each_candidate_once(
    sizes, limit, too_large
):
    sizes = sizes + [math.inf] * too_large  # the steps too large to plan, at the end
    found, probed = search(sizes, limit)
    assert found == end_of_prefix(sizes, limit)
    assert len(probed) == len(set(probed))  # no candidate planned twice
    assert len(probed) <= 3 * len(sizes).bit_length() + 2  # O(log n), whatever the growth


def test_linear_sizes_take_four_probes_whatever_the_limit():
    sizes = range(1000, 1000 + 37 * 2**20, 37)  # a step's peak against its batch: about this
    for limit in (1000, 1036, 1037, 5_000_000, 1000 + 37 * (2**20 - 2), 10**15):
        found, probed = search(sizes, limit)
        assert found == min((limit - 1000) // 37, 2**20 - 1)
        assert len(probed) <= 4, (limit, probed)


@pytest.mark.parametrize("growth", [lambda i: i**4, lambda i: int(1.01**i), lambda i: 2**i])
def test_sizes_far_from_a_line_still_take_o_log_n_probes(growth):
    sizes = [growth(i) for i in range(4096)]  # a line through two probes misses by far
    for k in range(0, len(sizes), 97):
        found, probed = search(sizes, sizes[k])
        assert found == max(i for i, size in enumerate(sizes) if size == sizes[k])
        assert len(probed) <= 3 * len(sizes).bit_length() + 2, k


def test_candidates_too_large_to_measure_are_bisected_over():
    sizes = list(range(1000)) + [math.inf] * 1000  # steps too large to plan from index 1000 on
    found, probed = search(sizes, 10**9)
    assert found == 999
    assert len(probed) <= 2 * len(sizes).bit_length() + 3  # bisection's count, not a crawl


def test_a_limit_beyond_every_candidate_takes_three_probes_the_last_one_included():
    sizes = range(10, 4000)
    last = len(sizes) - 1
    assert search(sizes, 10**12) == (last, [0, 1, last])  # the line through 0 and 1 says so


# -- the searches of nnmem plan: each step planned once, the answer of planning them all --------


def count_plans(monkeypatch):
    """The (batch, depth) of every step nnmem plan plans, in order."""
    planned = []
    plan_step = plan_command.plan_step

    def counted(args, sample, batch, depth, **kwargs):
        planned.append((batch, depth))
        return plan_step(args, sample, batch, depth, **kwargs)

    monkeypatch.setattr(plan_command, "plan_step", counted)
    return planned


def probe_lines(err):
    """The probe lines of a search: (depth, fits)."""
    return [
        (int(m[1]), m[2] == "fits")
        for m in re.finditer(
            r"probe \d+: resnet-(\d+) at batch \d+ \.\.\..*?(fits|does not fit) ", err
        )
    ]


def test_find_depth_answers_as_planning_every_depth_would(capsys, monkeypatch):
    monkeypatch.setattr(plan_command, "MAX_SEARCH_DEPTH", 38)  # CIFAR depths 8, 14, ..., 38
    depths = list(range(8, 39, 6))
    peaks = [
        plan(create_model("resnet", depth=d), (2, 3, 32, 32)).best().peak_bytes for d in depths
    ]
    assert peaks == sorted(peaks)  # the search's premise, here
    planned = count_plans(monkeypatch)
    for budget in (peaks[3], peaks[3] - 1):  # on a peak to the byte, and a byte below it
        planned.clear()
        argv = ["plan", "--model", "resnet", "--batch", "2", "--input", "3x32x32", "--find-depth"]
        assert main(argv + ["--budget", str(budget)]) == 0
        out, err = capsys.readouterr()
        found = re.search(r"deepest ResNet that fits [^:]+: (\d+)\n", out)[1]
        assert int(found) == depths[end_of_prefix(peaks, budget)]
        assert "ResNet, input 2x3x32x32" in out  # the table of the step found, not planned again
        probes = probe_lines(err)
        assert [d for _, d in planned] == [d for d, _ in probes]  # a line per step planned
        assert len(planned) == len(set(planned))  # each once, the answer's table included
        assert all(fits == (peaks[depths.index(d)] <= budget) for d, fits in probes)


def test_a_budget_beyond_every_depth_plans_three_depths_the_deepest_included(capsys, monkeypatch):
    monkeypatch.setattr(plan_command, "MAX_SEARCH_DEPTH", 110)
    planned = count_plans(monkeypatch)
    assert main(["plan", "--model", "resnet", "--find-depth", "--budget", "1000TiB"]) == 0
    out, err = capsys.readouterr()
    assert "deepest ResNet that fits 1000.0 TiB: at least 110 (the search stops at 110)" in out
    assert [d for _, d in planned] == [8, 14, 110]
    # each probe's peak in its own unit: "0.0 TiB" against 1000 TiB would hide it
    peaks = re.findall(r"fits 1000\.0 TiB: peak (\S+ \S+) with", err)
    assert len(peaks) == 3 and all(peak.endswith(" MiB") for peak in peaks), err


def test_find_batch_takes_a_few_probes_among_a_million_batches(capsys, monkeypatch):
    planned = count_plans(monkeypatch)
    assert main(["plan", "--model", "mlp", "--find-batch", "--budget", "4MiB"]) == 0
    out = capsys.readouterr().out
    batch = int(re.search(r"largest batch that fits 4\.0 MiB: (\d+)\n", out)[1])
    batches = [b for b, _ in planned]
    assert batch in batches and batch + 1 in batches  # the end of the prefix, both sides
    assert len(batches) <= 6 and len(batches) == len(set(batches))
