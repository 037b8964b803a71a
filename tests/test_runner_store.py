"""scripts/runner_store.sh, the GPU workflow's kept folders: made where the runner's user can write, the
pull request's venvs apart from main's, earlier results restored without overwriting the checkout's, and
a store the user cannot write refused in one line that says how to fix it."""

from __future__ import annotations

import shutil

from conftest import ROOT, run_script


def store_script(checkout, *args, env=None):
    return run_script("scripts/runner_store.sh", *args, cwd=checkout, env=env, timeout=60)


def _checkout(tmp_path):
    """The script alone in a folder shaped like a checkout (it works on the checkout's results/)."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "runner_store.sh", checkout / "scripts")
    return checkout


def test_prepare_makes_the_folders_and_exports_them(tmp_path):
    checkout = _checkout(tmp_path)
    github_env = tmp_path / "github_env"
    # the default: under the runner user's home
    out = store_script(
        checkout, "prepare", env={"HOME": str(tmp_path / "home"), "RUNNER_STORE": "", "GITHUB_ENV": str(github_env)}
    )
    assert out.returncode == 0, out.stderr
    store = tmp_path / "home" / ".cache" / "eagle-fix"
    assert (store / "results").is_dir() and (store / "venvs").is_dir()
    assert github_env.read_text().splitlines() == [f"RESULTS_STORE={store}/results", f"VENV_STORE={store}/venvs"]
    # a pull request: venvs of its own, in the folder the repository variable names
    moved = tmp_path / "elsewhere"
    out = store_script(checkout, "prepare", "--pr", env={"RUNNER_STORE": str(moved), "GITHUB_ENV": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"RESULTS_STORE={moved}/results", f"VENV_STORE={moved}/venvs-pr"]
    assert (moved / "venvs-pr").is_dir() and not (moved / "venvs").exists()


def test_restore_keeps_the_checkouts_files_and_keep_stores_them(tmp_path):
    checkout = _checkout(tmp_path)
    store = tmp_path / "store"
    (store / "results" / "runs").mkdir(parents=True)
    (store / "results" / "runs" / "old.jsonl").write_text("kept from an earlier run\n")
    (store / "results" / "runs" / "both.jsonl").write_text("the store's copy\n")
    (checkout / "results" / "runs").mkdir(parents=True)
    (checkout / "results" / "runs" / "both.jsonl").write_text("the checkout's copy\n")
    env = {"RUNNER_STORE": str(store)}
    out = store_script(checkout, "restore", env=env)
    assert out.returncode == 0, out.stderr
    assert (checkout / "results" / "runs" / "old.jsonl").read_text() == "kept from an earlier run\n"
    assert (checkout / "results" / "runs" / "both.jsonl").read_text() == "the checkout's copy\n"
    (checkout / "results" / "runs" / "new.jsonl").write_text("this run\n")
    out = store_script(checkout, "keep", env=env)
    assert out.returncode == 0, out.stderr
    assert (store / "results" / "runs" / "new.jsonl").read_text() == "this run\n"
    assert (store / "results" / "runs" / "both.jsonl").read_text() == "the checkout's copy\n"


def test_a_store_that_cannot_be_made_is_one_line_naming_the_fix(tmp_path):
    checkout = _checkout(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made under a file, even by root (which chmod would not stop)
    out = store_script(checkout, "prepare", env={"RUNNER_STORE": str(blocker / "store")})
    assert out.returncode == 1
    (line,) = out.stderr.strip().splitlines()
    assert f"cannot write {blocker}/store/results" in line
    assert "sudo install -d -o" in line and "EAGLE_FIX_RUNNER_STORE" in line
    for bad, words in ((["prepare"], "not an absolute path"), (["tidy"], "give prepare [--pr], restore or keep")):
        env = {"RUNNER_STORE": "relative/store"} if bad == ["prepare"] else {}
        out = store_script(checkout, *bad, env=env)
        assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1 and words in out.stderr
    # keep with nothing to keep loses nothing and says so
    out = store_script(checkout, "keep", env={"RUNNER_STORE": str(tmp_path / "s")})
    assert out.returncode == 1 and "no results/" in out.stderr
