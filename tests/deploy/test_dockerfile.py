"""The Dockerfile, read instruction by instruction (there is no Docker engine here)."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import make_url

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


# name:tag@sha256:<64 hex digits>: a tag names the version, the digest fixes the contents.
PINNED_IMAGE = re.compile(r"[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}")


def test_multi_stage_build_with_a_slim_python_final_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    names = [s.name for s in stages[:-1]]
    assert all(names), "every build stage is named, so COPY --from says what it takes"
    assert stages[-1].base.startswith("python:3.11.") and "-slim" in stages[-1].base


def test_base_images_are_pinned_by_tag_and_digest(stages: list[Stage]) -> None:
    for stage in stages:
        assert PINNED_IMAGE.fullmatch(stage.base), f"FROM {stage.base}: pin it as name:tag@sha256"
        assert not stage.base.split("@")[0].endswith(":latest")
    # One base for building and running: what the wheel was built against is what runs it.
    assert {s.base for s in stages} == {stages[-1].base}
    assert "# syntax=" not in (REPO / "Dockerfile").read_text(), "an unpinned frontend image"


def test_image_installs_the_built_wheel_over_the_locked_dependencies(stages: list[Stage]) -> None:
    build = next(s for s in stages if any("pip wheel" in r for r in s.all("RUN")))
    runs = " && ".join(build.all("RUN"))
    assert "--require-hashes -r requirements/runtime.txt" in runs
    assert "--require-hashes -r requirements/build.txt" in runs
    assert "pip wheel --no-deps --no-build-isolation --wheel-dir /dist ." in runs
    assert "/opt/venv/bin/pip install --no-index /dist/devicedeck-" in runs
    assert " -e " not in f" {runs} ", "an editable install ties the image to the source tree"
    # The wheel's resources (migrations, templates, static with the vendored scripts) are
    # copied into the build stage before the wheel is built.
    copied = {copy_parts(c)[2].removeprefix("./") for c in build.all("COPY")}
    assert {"devicedeck", "migrations", "templates", "static", "requirements"} <= copied
    assert not any("npm" in r for s in stages for r in s.all("RUN")), "no Node.js needed"


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


def test_final_stage_runs_the_installed_package_alone(stages: list[Stage]) -> None:
    final = stages[-1]
    # Only the virtualenv: the wheel in it carries migrations, templates and static files.
    assert [copy_parts(c) for c in final.all("COPY")] == [
        (stages[0].name, ["/opt/venv"], "/opt/venv")
    ]
    env = " ".join(final.all("ENV"))
    assert "PATH=/opt/venv/bin:$PATH" in env
    assert "PYTHONPATH" not in env
    assert final.all("WORKDIR")[-1] == "/var/lib/devicedeck"


def test_copied_paths_exist_and_are_not_docker_ignored(stages: list[Stage]) -> None:
    ignored = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for forbidden in (".venv", "node_modules", "devicedeck-data", ".git"):
        assert forbidden in ignored, f".dockerignore must keep {forbidden} out of the context"
    # The vendored scripts are part of the source the wheel is built from.
    assert not [p for p in ignored if fnmatch.fnmatch("static/vendor", p)]
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
