"""The Dockerfile, read instruction by instruction (there is no Docker engine here)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import make_url

from app.ui.assets import VENDORED_FILES

from .helpers import REPO, parse_command


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [value for k, value in self.instructions if k == keyword]


def read_dockerfile() -> list[Stage]:
    """Stages with their instructions; continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, value = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = value.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, value.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return read_dockerfile()


def exec_form(value: str) -> list[str]:
    parsed = json.loads(value)
    assert isinstance(parsed, list) and all(isinstance(p, str) for p in parsed), value
    return parsed


def copy_parts(value: str) -> tuple[str | None, list[str], str]:
    words = shlex.split(value)
    source_stage = None
    while words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            source_stage = flag.removeprefix("--from=")
    return source_stage, words[:-1], words[-1]


def test_multi_stage_build_with_a_slim_python_final_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 3
    names = [s.name for s in stages[:-1]]
    assert all(names), "every build stage is named, so COPY --from says what it takes"
    assert stages[-1].base == "python:3.11-slim"
    assert all(":" in s.base and not s.base.endswith(":latest") for s in stages), "pin tags"


def test_npm_ci_runs_from_the_lockfile(stages: list[Stage]) -> None:
    (frontend,) = [s for s in stages if any("npm ci" in r for r in s.all("RUN"))]
    copied = [src for v in frontend.all("COPY") for src in copy_parts(v)[1]]
    assert "package.json" in copied and "package-lock.json" in copied
    assert frontend.base.startswith("node:")
    assert not any("npm install" in r for s in stages for r in s.all("RUN"))


def test_vendored_assets_come_from_the_node_stage(stages: list[Stage]) -> None:
    frontend = next(s for s in stages if any("npm ci" in r for r in s.all("RUN")))
    # The build stage copies node_modules from the npm stage and runs app.ui.assets, the
    # same code that `make assets` runs, so the file names cannot drift.
    build = next(
        s
        for s in stages
        if any(copy_parts(c)[0] == frontend.name for c in s.all("COPY"))
        and any("app.ui.assets" in r for r in s.all("RUN"))
    )
    final_copies = [copy_parts(c) for c in stages[-1].all("COPY")]
    assert (build.name, ["/app/static/vendor"], "./static/vendor") in final_copies
    assert set(VENDORED_FILES) == {"htmx.min.js", "htmx-ext-sse.min.js"}


def test_runs_as_a_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].all("USER")
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")


def test_default_sqlite_database_is_writable_by_that_user(stages: list[Stage]) -> None:
    final = stages[-1]
    env = " ".join(final.all("ENV"))
    url = re.search(r"DEVICEDECK_DATABASE_URL=(\S+)", env)
    assert url, "a bare `docker run` needs a database the non-root user can write"
    directory = make_url(url.group(1)).database
    assert directory is not None
    directory = directory.rpartition("/")[0]
    user = final.all("USER")[-1].split(":")[0]
    setup = " ".join(final.all("RUN"))
    # mkdir -p of the directory or of one below it creates it.
    assert f"mkdir -p {directory}" in setup
    assert re.search(rf"chown -R {user}:\S+ {directory}\b", setup)


def test_health_check_probes_livez_without_curl(stages: list[Stage]) -> None:
    (healthcheck,) = stages[-1].all("HEALTHCHECK")
    command = healthcheck[healthcheck.index("CMD") + 3 :].strip()
    argv = exec_form(command)
    assert argv[0] == "python"
    assert "http://127.0.0.1:8000/livez" in argv[-1]
    assert "curl" not in healthcheck and "wget" not in healthcheck
    # The probe is valid Python.
    compile(argv[-1], "<healthcheck>", "exec")


def test_entrypoint_and_default_command(stages: list[Stage]) -> None:
    final = stages[-1]
    assert exec_form(final.all("ENTRYPOINT")[-1]) == ["devicedeck"]
    command = exec_form(final.all("CMD")[-1])
    args = parse_command(command)
    assert (command[0], args.host, args.port) == ("serve", "0.0.0.0", 8000)
    assert "8000" in final.all("EXPOSE")


def test_final_stage_has_what_the_service_reads_at_run_time(stages: list[Stage]) -> None:
    final = stages[-1]
    targets = {copy_parts(c)[2].removeprefix("./").rstrip("/") for c in final.all("COPY")}
    assert {"app", "migrations", "templates", "static", "static/vendor", "/opt/venv"} <= targets
    workdir = final.all("WORKDIR")[-1]
    assert workdir == "/app"
    env = " ".join(final.all("ENV"))
    assert "PATH=/opt/venv/bin:$PATH" in env
    # app.migrate finds migrations/ next to the app package, so app runs from /app.
    assert "PYTHONPATH=/app" in env


def test_copied_paths_exist_and_are_not_docker_ignored(stages: list[Stage]) -> None:
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for forbidden in (".venv", "node_modules", "static/vendor", "devicedeck-data", ".git"):
        assert forbidden in ignored, f".dockerignore must keep {forbidden} out of the context"
    for stage in stages:
        for value in stage.all("COPY"):
            source_stage, sources, _ = copy_parts(value)
            if source_stage is not None:
                continue
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
                assert not any(fnmatch.fnmatch(source, p) for p in ignored), (
                    f"COPY {source}: excluded by .dockerignore"
                )


def test_dependency_layer_installs_exactly_the_project_dependencies(stages: list[Stage]) -> None:
    (run,) = [r for s in stages for r in s.all("RUN") if "tomllib" in r]
    command = run.split(" > ")[0]
    # Run the stage's own extraction command here, with the same pyproject.toml.
    argv = shlex.split(command)
    assert argv[0] == "python"
    output = subprocess.run(
        [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    with (REPO / "pyproject.toml").open("rb") as f:
        expected = tomllib.load(f)["project"]["dependencies"]
    assert output.splitlines() == expected
