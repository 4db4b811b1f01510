"""docs/python.md and docs/langgraph.md are literal: their ```python blocks run, in order, in
one namespace, in a scratch directory, as a newcomer following the page would run them; and
their install commands do what they say."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import pytest

DOC = pathlib.Path(os.environ.get("REVL_REPO", pathlib.Path(__file__).parents[2])) / "docs/python.md"


def blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_every_python_block_of_the_reference_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = blocks(DOC.read_text())
    assert len(code) >= 6, f"{DOC} lost its examples"
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {"__name__": "__docs__"}
    for i, block in enumerate(code):
        try:
            exec(compile(block, f"{DOC.name} block {i + 1}", "exec"), ns)
        except BaseException as e:  # noqa: BLE001 - say which block failed
            raise AssertionError(f"{DOC.name}, python block {i + 1} failed: {e!r}\n{block}") from e
    out = capsys.readouterr().out
    # The first example sent exactly one email, at the commit.
    lines = (tmp_path / "outbox.jsonl").read_text().splitlines()
    assert lines == ['{"to": "ana@example.com", "subject": "Fixed"}'], lines
    assert "parent-branch" in out and "['src/app.py']" in out
    assert "ConnectionError" in out
    # Content over 16 MiB: BadArgs, nothing written, and the hint says how to put it in place.
    assert "put it in place with a sandboxed command (exec" in out
    assert not (tmp_path / "work2" / "big.bin").exists()
    # A name that is not UTF-8: written under its real bytes, named by verify() as text.
    assert (tmp_path / "work2" / os.fsdecode(b"caf\xe9.txt")).read_bytes() == b"menu\nmore\n"
    assert "[True]" in out
    # The approval line it printed is a command that works: a human approves from a terminal.
    approve = next(l for l in out.splitlines() if l.startswith("revl --store store approve "))
    # The `revl` command installed with the package, beside this interpreter.
    exe = str(pathlib.Path(sys.executable).parent / "revl")
    done = subprocess.run([exe, *approve.split()[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    e = ns["e"]
    post = ns["post_message"]
    res = e.call(post, {"text": "deploying"})  # type: ignore[attr-defined]
    assert res.witness == {"posted": "deploying"}


def test_the_langgraph_guide_is_a_program_that_runs(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/langgraph.md's ```python blocks, in order, in one namespace, in a scratch
    directory: the agent drafts, travels back and sends the formal reply once; the travel
    names the held sends it dropped (the target checkpoint's own among them)."""
    guide = DOC.parent / "langgraph.md"
    code = blocks(guide.read_text())
    assert len(code) >= 2, f"{guide} lost its program"
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {"__name__": "__langgraph_docs__"}
    for i, block in enumerate(code):
        try:
            # As a file of its own: without this module's `from __future__ import annotations`.
            exec(compile(block, f"{guide.name} block {i + 1}", "exec", dont_inherit=True), ns)
        except BaseException as e:  # noqa: BLE001 - say which block failed
            raise AssertionError(f"{guide.name}, python block {i + 1} failed: {e!r}\n{block}") from e
    out = capsys.readouterr().out
    sent = [json.loads(line) for line in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    assert sent == [{"to": "ann@example.com", "body": ns["formal"]}], sent
    assert "['team@example.com', 'ann@example.com']" in out, out
    assert ns["model"].script == [], "every scripted answer was used"  # type: ignore[attr-defined]
    saver = ns["saver"]
    lines = saver.thread_sessions("ann")  # type: ignore[attr-defined]
    assert len(lines) == 2 and lines[1].status().state == "committed"


def test_the_readme_python_example_runs(tmp_path: pathlib.Path) -> None:
    readme = DOC.parents[1] / "README.md"
    (block,) = blocks(readme.read_text())
    # Its paths moved under this test's directory (the README uses /tmp).
    block = block.replace("/tmp/", f"{tmp_path}/")
    ns: dict[str, object] = {"__name__": "__readme__"}
    exec(compile(block, "README.md python block", "exec"), ns)
    s = ns["s"]
    assert s.status().state == "committed"  # type: ignore[attr-defined]
    assert (tmp_path / "ws/reply.md").read_bytes() == b"Thanks, fixed.\n"


@pytest.mark.parametrize("name", ["held_send.py", "what_if.py"])
def test_the_examples_run_and_refuse_a_used_directory(tmp_path: pathlib.Path, name: str) -> None:
    script = DOC.parents[1] / "examples/python" / name
    where = tmp_path / "run"
    ran = subprocess.run([sys.executable, str(script), str(where)], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert (where / "store").is_dir()
    again = subprocess.run([sys.executable, str(script), str(where)], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 2 and "not empty" in again.stderr, again.stderr
    fresh = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr


def test_the_reference_lists_every_result_class_and_no_member_that_does_not_exist() -> None:
    """docs/python.md's "Results" section names every class of `revl.results` and the
    members it names exist."""
    import revl.results

    text = DOC.read_text()
    section = text[text.index("## Results") : text.index("## Errors")]
    for name in revl.results.__all__:
        assert f"`{name}`" in section, f"docs/python.md, Results, does not list {name}"
    assert "`rewind` member" not in section
    for member in re.findall(r"`\.([a-z_]+)`", section):
        assert hasattr(revl.results.ForkReport, member) or member in revl.results.ForkReport.__annotations__, member


def _extra_ranges() -> list[str]:
    """The `langgraph` extra of python/pyproject.toml (read with a regex: tomllib is 3.11+)."""
    text = (DOC.parents[1] / "python/pyproject.toml").read_text()
    (extra,) = re.findall(r"^langgraph = \[(.*)\]$", text, flags=re.M)
    return re.findall(r'"([^"]+)"', extra)


def test_the_langgraph_install_adds_langgraph_without_building_revl() -> None:
    """docs/langgraph.md's install commands, run offline as a dry run in this environment
    (where revl and the pinned LangGraph are installed): each is satisfied from what is
    there, so none builds revl's native extension again (`./python[langgraph]` would: pip
    builds a local directory afresh on every install). The pins satisfy the extra's ranges,
    and the page's plain command names exactly those ranges."""
    from packaging.requirements import Requirement

    guide = (DOC.parent / "langgraph.md").read_text()
    install = guide[guide.index("## Install") : guide.index("## Use")]
    commands = [shlex.split(line[2:]) for line in install.splitlines() if line.startswith("$ pip install")]
    assert ["pip", "install", "-r", "python/requirements-langgraph.txt"] in commands, install
    for readme in ("python/README.md", "examples/tree_search/README.md"):
        assert "pip install -r python/requirements-langgraph.txt" in (DOC.parents[1] / readme).read_text(), readme
    assert "pip install -r python/requirements-langgraph.txt" in DOC.read_text()
    for argv in commands:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
             "--disable-pip-version-check", *argv[2:]],
            cwd=DOC.parents[1], capture_output=True, text=True, timeout=300,
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{shlex.join(argv)} needs a build or a download:\n{out}"
        assert "Would install" not in out and "Building" not in out, out
    pins = {}
    for line in (DOC.parents[1] / "python/requirements-langgraph.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    ranges = _extra_ranges()
    for r in map(Requirement, ranges):
        assert r.specifier.contains(pins[r.name]), (r, pins[r.name])
    assert ["pip", "install", *ranges] in commands, (ranges, commands)


def test_the_user_guide_brings_a_winning_branch_back_from_under_tmp(tmp_path: pathlib.Path) -> None:
    """docs/user-guide.md, "When a branch wins", run as written with the installed `revl`
    on a winner whose directory is under /tmp (private in the exec sandbox) and which
    changed more than one file: a modified file, a new directory with a file, a deleted
    directory with its contents, a mode, a retargeted symlink. Afterwards the parent and
    the winner do not differ, and the parent's workspace holds the winner's files."""
    from conftest import REVL_CLI, unmount_under

    guide = (DOC.parent / "user-guide.md").read_text()
    section = guide[guide.index("### When a branch wins") : guide.index("## 7. ")]
    block = section[section.index("```console\n") + len("```console\n") :]
    block = block[: block.index("```")]
    commands: list[str] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append(line[2:])
        elif (line.startswith("> ") or line == ">") and commands:
            commands[-1] += "\n" + line[2:]
    home = pathlib.Path(tempfile.mkdtemp(dir="/tmp", prefix="revl-guide-"))
    try:
        setup = r"""
        set -e
        P=$(revl --json new --workspace ~/work/search | jq -er .session)
        revl write $P answer.txt --content "draft" > /dev/null      # step 1
        revl mkdir $P gone > /dev/null                              # step 2
        revl write $P gone/x --content x > /dev/null                # step 3
        revl write $P run.sh --content "echo run" > /dev/null       # step 4
        revl exec $P -- ln -s answer.txt ln2 > /dev/null            # step 5
        T=()
        for n in 1 2 3; do
          H=$(revl --json fork $P --at 5 | jq -er .hash)
          T+=($(revl --json fork-confirm $P --hash "$H" --into ~/work/try-$n | jq -er .branch))
        done
        T1=${T[0]} T2=${T[1]} T3=${T[2]}
        revl write $T2 answer.txt --content "thank you" > /dev/null
        revl mkdir $T2 sub > /dev/null
        revl write $T2 sub/new.txt --content "new" > /dev/null
        revl delete $T2 gone > /dev/null
        revl chmod $T2 run.sh 755 > /dev/null
        revl exec $T2 -- ln -sfn run.sh ln2 > /dev/null
        set +e
        """
        script = setup + "\n".join(commands) + "\nrevl diff $P $T2 > /dev/null; echo \"diff:$?\"\necho \"P=$P T2=$T2\"\n"
        env = dict(os.environ, HOME=str(home), PATH=f"{REVL_CLI.parent}:{os.environ['PATH']}",
                   REVL_STORE=str(tmp_path / "store"))
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
        out = done.stdout + done.stderr
        assert "diff:0" in out, out
        ws, win = home / "work/search", home / "work/try-2"
        assert str(win).startswith("/tmp/")
        for rel in ("answer.txt", "sub/new.txt", "run.sh"):
            assert (ws / rel).read_bytes() == (win / rel).read_bytes(), rel
        assert not (ws / "gone").exists()
        assert os.stat(ws / "run.sh").st_mode & 0o777 == 0o755
        assert os.readlink(ws / "ln2") == "run.sh"
    finally:
        # The tries are layered mounts where the machine has no snapshot or reflink.
        unmount_under(home)
        shutil.rmtree(home, ignore_errors=True)
