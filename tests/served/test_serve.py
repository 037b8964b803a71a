"""Served mode (eagle_fix.served.server): the tiny pair's tokenizer, the server's arguments, ports, vLLM's client
arguments; and, marked `engine`, one real server: health, a cell through vLLM's bench, the drafter's
counters through the server, and Ctrl-C / SIGTERM leaving no server behind. (A server killed mid-cell:
tests/served/test_map.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, default_signals, eagle_fix_cli
from eagle_fix.core.errors import EagleFixError
from eagle_fix.engine import lifecycle
from eagle_fix.pairs import tokenizer
from eagle_fix.pairs.profiles import tiny_pair
from eagle_fix.served import client
from eagle_fix.served import server as serve

TARGET, DRAFT = tiny_pair()


# ----------------------------------------------------------------------------- the tokenizer


def test_shipped_tokenizer_round_trips_every_id():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TARGET / "tokenizer.json"))
    ids = list(range(512))
    assert tok.encode(tokenizer.ids_to_text(ids)).ids == ids
    assert tok.get_vocab_size() == 512
    from eagle_fix.core.workload import make_prompts

    prompt = make_prompts(2048, 1, vocab_size=512, seed=3)[0]
    assert tok.encode(tokenizer.ids_to_text(prompt)).ids == prompt
    assert tok.decode(prompt[:5]).replace(" ", "") == tokenizer.ids_to_text(prompt[:5])
    assert tok.encode("0a 0b").ids == tok.encode("0a0b").ids == [10, 11]


def test_shipped_tokenizer_through_transformers_adds_nothing():
    """What the server and vLLM's client load (PreTrainedTokenizerFast from tokenizer_config.json): no
    BOS or EOS added, so a prompt of n words is n tokens, the ids the suite's workload chose."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TARGET))
    ids = [5, 0, 511, 17]
    assert tok(tokenizer.ids_to_text(ids)).input_ids == ids
    assert len(tok) == 512


def test_prompt_text_fits_vllms_characters_per_token_bound():
    """vLLM refuses, before tokenizing, a prompt of more than 4 characters per token of max_model_len:
    the words are short enough that a prompt of the whole context passes."""
    ids = list(range(512)) * 16
    longest = max(len(w) for w in json.loads((TARGET / "tokenizer.json").read_text())["model"]["vocab"])
    assert len(tokenizer.ids_to_text(ids)) <= longest * len(ids)


def test_the_chat_workloads_prompts_reach_vllms_client_as_the_same_ids(tmp_path):
    """The map's chat cells: held-out ShareGPT prompts written as text through the chat pair's tokenizer.json
    come back, tokenized as the server will, as the very ids the sweep's points use."""
    from tokenizers import Tokenizer

    from eagle_fix.core.workload import workload_prompts
    from eagle_fix.pairs.profiles import MAP_PROFILES, PROFILES

    target = str(PROFILES[MAP_PROFILES["cpu-map-chat"].profile].target)
    prompts = workload_prompts("chat", 1500, 2, vocab_size=1024, seed=3, target=target)
    path = client.write_prompts(tmp_path / "p.jsonl", prompts, 1024, workload="chat", target=target)
    tok = Tokenizer.from_file(f"{target}/tokenizer.json")
    texts = [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
    # BPE merges across the joins of separately encoded texts may re-tokenize a few ids apart, never into more
    # tokens (a request must not run past max_model_len); the text is cut only at the front: the question
    # and the answer cue at the end arrive whole
    for ids, text in zip(prompts, texts, strict=True):
        assert len(ids) - 10 <= len(tok.encode(text).ids) <= len(ids)
        assert text.endswith(tok.decode(ids)[-1000:]) and text.endswith("Assistant:")
    assert prompts[0] != prompts[1]
    assert "User:" in json.loads(path.read_text().splitlines()[0])["prompt"]  # chat text, not the tiny words


def test_unknown_word_is_an_error_not_a_silent_id():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TARGET / "tokenizer.json"))
    # the Rust tokenizer raises a plain Exception: its message says which rule refused the word
    with pytest.raises(Exception, match="Missing \\[UNK\\] token"):
        tok.encode("01zz")
    with pytest.raises(Exception, match="Missing \\[UNK\\] token"):
        tok.encode("010")  # half a word


def test_shipped_files_are_what_the_generator_writes(tmp_path):
    (tmp_path / "config.json").write_text((TARGET / "config.json").read_text())
    for f in tokenizer.write_tokenizer(tmp_path):
        assert f.read_text() == (TARGET / f.name).read_text(), f"{f.name}: run eagle-fix map --write-tokenizer {TARGET}"


def test_offline_engine_still_skips_the_tokenizer():
    """The offline engine feeds token ids and never loads the tokenizer that now ships beside it."""
    from eagle_fix.engine.spec import EngineSpec

    kw = EngineSpec(target=str(TARGET), draft=str(DRAFT), mode="eager", fix="on", max_model_len=4096).llm_kwargs()
    assert kw["skip_tokenizer_init"] is True


# ----------------------------------------------------------------------------- arguments and ports


def _spec(draft=True, **kw):
    from eagle_fix.engine.spec import EngineSpec

    return EngineSpec(
        target=str(TARGET),
        draft=str(DRAFT) if draft else None,
        mode="eager",
        fix="on" if draft else None,
        max_model_len=2048,
        kv_cache_gib=1.0,
        max_num_seqs=2,
        **kw,
    )


def test_server_args_carry_the_engine_settings():
    args = serve.server_args(_spec(), 8123)
    joined = " ".join(args)
    assert "--host 127.0.0.1 --port 8123" in joined
    assert "--enforce-eager" in args and "--no-enable-prefix-caching" in args
    assert "--max-model-len 2048" in joined and "--max-num-seqs 2" in joined
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 3
    assert args[args.index("--worker-extension-cls") + 1].startswith("eagle_fix.")
    base = serve.server_args(_spec(draft=False), 8123, prefix_caching=True)
    assert "--speculative-config" not in base and "--enable-prefix-caching" in base


def test_server_args_parse_with_vllms_own_parser():
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # older releases
        from vllm.entrypoints.openai.cli_args import make_arg_parser

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(serve.server_args(_spec(), 8123))
    assert ns.port == 8123 and ns.enforce_eager and ns.enable_prefix_caching is False
    assert ns.speculative_config["model"] == str(DRAFT)
    assert ns.tensor_parallel_size == 1
    # a tensor-parallel profile's server (cpu-tp2) gets vLLM's own flags for it
    tp = serve.server_args(_spec(tensor_parallel_size=2, distributed_executor_backend="mp"), 8123)
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(tp)
    assert ns.tensor_parallel_size == 2 and ns.distributed_executor_backend == "mp"


def test_busy_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(EagleFixError) as err:
            serve.check_port(port)
    assert str(err.value) == f"port {port} on 127.0.0.1 is in use: give another --port, or none for a free one"
    assert "\n" not in str(err.value)


def test_busy_port_refused_before_any_server_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = eagle_fix_cli("map", "--port", str(port), "--out", str(tmp_path / "m.ndjson"), timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"eagle-fix map: error: port {port} on 127.0.0.1 is in use: give another --port, or none for a free one"
    ]
    assert not (tmp_path / "m.ndjson").exists()


def test_bench_args_parse_with_vllms_client_parser(tmp_path):
    data = client.write_prompts(tmp_path / "p.jsonl", [[1, 2, 3], [4, 5]])
    assert [json.loads(line)["prompt"] for line in data.read_text().splitlines()] == ["010203", "0405"]
    argv = client.bench_args(
        "http://127.0.0.1:9",
        str(TARGET),
        data,
        num_prompts=2,
        output_len=8,
        max_concurrency=2,
        request_rate=None,
        seed=7,
    )
    ns = client.parse_bench_args(argv)
    assert ns.dataset_name == "custom" and ns.skip_chat_template and ns.disable_shuffle
    assert ns.max_concurrency == 2 and ns.request_rate == float("inf") and ns.temperature == 0 and ns.ignore_eos
    rate = client.parse_bench_args(
        client.bench_args(
            "http://x", "m", data, num_prompts=2, output_len=8, max_concurrency=None, request_rate=0.5, seed=7
        )
    )
    assert rate.request_rate == 0.5 and rate.max_concurrency is None
    assert client.bench_command(argv).startswith("vllm bench serve --backend openai")


# ----------------------------------------------------------------------------- the real server


def _group_alive(pgid: int) -> bool:
    """A process of the group still runs (zombies, waiting for init to reap them, run nothing)."""
    return bool(lifecycle.live_members(pgid))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One EAGLE3 server for the engine tests below that leave it running."""
    log = tmp_path_factory.mktemp("serve") / "server.log"
    srv = serve.ServerProcess(_spec(), log)
    yield srv
    srv.close()
    assert not _group_alive(srv.pid)


@pytest.mark.engine
def test_server_answers_and_counts_the_drafter(server, tmp_path):
    from eagle_fix.core.workload import make_prompts

    assert server.healthy()
    assert server.reset_drafter_stats() is None
    data = client.write_prompts(tmp_path / "p.jsonl", make_prompts(1024, 2, vocab_size=512, seed=11))
    res = client.run_bench(
        client.bench_args(
            server.base_url,
            str(TARGET),
            data,
            num_prompts=2,
            output_len=16,
            max_concurrency=2,
            request_rate=None,
            seed=1,
        ),
        600,
    )
    assert res["completed"] == 2 and res["failed"] == 0
    assert res["total_input_tokens"] == 2 * 1024  # the words are the workload's ids, nothing added
    assert res["total_output_tokens"] == 32
    assert res["spec_decode_num_drafts"] > 0 and res["spec_decode_acceptance_length"] > 1.5
    stats, why = server.drafter_stats()
    assert why is None and stats["spec_steps"] > 0 and stats["proposals"] == stats["spec_steps"]


@pytest.mark.engine
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_leaves_no_server(tmp_path, signum):
    """eagle-fix map stopped by SIGTERM or Ctrl-C mid-run: exit 128+signal, no server process left."""
    out = tmp_path / "m.ndjson"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eagle_fix.cli",
            "map",
            "--contexts",
            "1024",
            "--concurrency",
            "1",
            "--arms",
            "eagle3",
            "--rounds",
            "1",
            "--output-len",
            "8",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,  # noqa: PLW1509 -- no threads yet; signals as from a terminal
    )
    deadline = time.monotonic() + 300
    pgids: set[int] = set()
    while time.monotonic() < deadline:  # until the server has started vLLM's engine core under it
        pgids |= _server_groups(proc.pid)
        if any(len(lifecycle.live_members(g)) >= 2 for g in pgids):
            break
        time.sleep(0.2)
    assert pgids, "no server started"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err[-2000:]
    assert f"interrupted by {signal.Signals(signum).name}" in err
    time.sleep(1)
    assert not [g for g in pgids if _group_alive(g)], "a server outlived the command"


def _server_groups(parent: int) -> set[int]:
    import psutil

    out = set()
    try:
        for child in psutil.Process(parent).children():
            if "eagle_fix.served.server" in " ".join(child.cmdline()):
                out.add(os.getpgid(child.pid))
    except (psutil.Error, ProcessLookupError):
        pass
    return out


def test_server_tpot_from_metrics_deltas():
    """The engine's own TPOT: the mean over the requests finished between two /metrics readings."""

    def text(total, count):
        return (
            f"# HELP vllm:request_time_per_output_token_seconds x\n"
            f'vllm:request_time_per_output_token_seconds_sum{{engine="0",model_name="m"}} {total}\n'
            f'vllm:request_time_per_output_token_seconds_count{{engine="0",model_name="m"}} {count}\n'
            f'vllm:request_time_per_output_token_seconds_bucket{{engine="0",le="0.01",model_name="m"}} {count}\n'
        )

    before, after = client.parse_metrics(text(0.5, 10)), client.parse_metrics(text(0.58, 14))
    assert before["vllm:request_time_per_output_token_seconds_count"] == 10
    assert client.server_tpot_ms(before, after) == pytest.approx(20.0)
    assert client.server_tpot_ms(before, before) is None  # no request finished
    assert client.server_tpot_ms(None, after) is None
