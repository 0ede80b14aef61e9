"""sweep/harbor/images.py: the task image derived from the test command, per language."""
from __future__ import annotations

import pytest

from sweep.harbor import images
from sweep.harbor.images import derive_image, language_of, runs_command

CASES = [
    (["python3", "-m", "pytest", "-q"], {"pyproject.toml", "requirements.txt"}, "python",
     ["python3 python3-venv", "RUN python3 -m pip install 'pytest==8.3.3'", "RUN python3 -m pip install -r requirements.txt",
      "RUN python3 -m pip install -e ."]),
    (["python3", "-m", "unittest"], set(), "python", ["python3 python3-venv", "RUN python3 -m venv /opt/venv"]),
    (["node", "--test"], {"package.json", "package-lock.json"}, "node", ["nodejs npm", "RUN npm ci --no-audit --no-fund"]),
    (["npx", "jest"], {"package.json"}, "node", ["nodejs npm", "RUN npm install --no-audit --no-fund",
                                                 "ENV PATH=/app/node_modules/.bin:$PATH"]),
    (["go", "test", "-json", "./..."], {"go.mod"}, "go", ["golang-go", "RUN go mod download"]),
    (["env", "RUST_BACKTRACE=1", "cargo", "test"], {"Cargo.toml"}, "rust", ["rustc cargo", "RUN cargo fetch"]),
    (["mvn", "-q", "test"], {"pom.xml"}, "java", ["default-jdk-headless maven", "dependency:go-offline"]),
    (["./gradlew", "test"], {"build.gradle"}, "java", ["default-jdk-headless"]),
]


@pytest.mark.parametrize("argv, files, language, lines", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_each_language_gets_its_toolchain_and_can_run_its_command(argv, files, language, lines):
    image = derive_image(argv, files)
    assert image.language == language == language_of(argv)
    for line in lines:
        assert line in image.dockerfile, (line, image.dockerfile)
    assert runs_command(image, argv) is None
    assert image.dockerfile.splitlines()[2].startswith("FROM debian:bookworm-slim@sha256:")
    assert "useradd --uid 1000" in image.dockerfile and "USER " not in image.dockerfile


def test_the_authors_image_leaves_the_repository_dependencies_out():
    """A remote provider builds the author's image without the repository (it uploads its own)."""
    image = derive_image(["python3", "-m", "pytest"], {"pyproject.toml"}, dependencies=False)
    assert "pip install -e ." not in image.dockerfile and "pytest==8.3.3" in image.dockerfile


def test_a_command_the_image_cannot_run_says_why():
    python = derive_image(["python3", "-m", "unittest"], set())
    assert "'node', which the python image does not provide" in runs_command(python, ["node", "--test"])
    assert "host path" in runs_command(python, ["/root/.venv/bin/python", "-m", "pytest"])
    assert runs_command(python, []) == "the test command is empty"
    assert language_of(["make", "test"]) is None
    assert "'make'" in runs_command(derive_image(["make", "test"], set()), ["make", "test"])


def test_no_word_of_the_test_command_reaches_the_dockerfile():
    argv = ["python3", "-m", "pytest", "$(touch /tmp/pwned)", "; echo owned"]
    image = derive_image(argv, {"setup.py"})
    assert "pwned" not in image.dockerfile and "owned" not in image.dockerfile


def test_a_shell_script_gets_the_image_of_the_repositorys_sources(tmp_path):
    """`sh run-tests.sh` names no language: a Java repository's script gets the Java image (with
    JUnit's console launcher) and can run there; with no source sweep knows it stays unknown."""
    (tmp_path / "src" / "clampx").mkdir(parents=True)
    (tmp_path / "src" / "clampx" / "Clamp.java").write_text("class Clamp {}\n")
    (tmp_path / "run-tests.sh").write_text("javac ...\n")
    (tmp_path / "tools.py").write_text("")
    (tmp_path / ".git").mkdir()
    for n in range(3):
        (tmp_path / ".git" / f"{n}.py").write_text("")           # hidden directories are not sources
    argv = ["sh", "run-tests.sh"]
    assert images.task_language(argv, tmp_path) == "java"
    image = derive_image(argv, {"run-tests.sh"}, language=images.task_language(argv, tmp_path))
    assert image.language == "java" and "junit5" in image.dockerfile and runs_command(image, argv) is None
    assert images.task_language(["sh", "x.sh"], tmp_path / "src" / "nothing") is None
    assert images.task_language(["make", "test"], tmp_path) is None    # only a shell's script


def test_a_bare_jest_is_installed_pinned_and_an_npx_one_is_the_projects():
    bare = derive_image(["jest", "--ci"], {"package.json"})
    assert "RUN npm install -g --no-audit --no-fund 'jest@29.7.0'" in bare.dockerfile
    assert runs_command(bare, ["jest", "--ci"]) is None
    assert "npm install -g" not in derive_image(["npx", "jest"], {"package.json"}).dockerfile
