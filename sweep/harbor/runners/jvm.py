"""Maven (Surefire) and Gradle: the JUnit XML reports they write into the build directory.

Neither can be told on its command line to write its reports elsewhere, so the invocation asks the
harness to `collect` them: empty the report directories before the run (a report planted in the
repository must not be read) and copy them under the report directory after it. Ids are
`classname.name` (`com.example.CalcTest.adds`), as the reports give them. A selected run names the
tests: Maven `-Dtest=Class#m1+m2,...` (with `-Dsurefire.failIfNoSpecifiedTests=false` for
modules that have none of them), Gradle `--tests Class.m` per test.
"""
from __future__ import annotations

from typing import Sequence

from sweep.harbor.runners.base import Invocation, Observed, Runner, program_name
from sweep.harbor.runners.junit_xml import method_name, parse_reports


def _class_and_method(test_id: str) -> tuple[str, str]:
    method = method_name(test_id)
    cls = test_id.split("(", 1)[0].split("[", 1)[0]
    cls = cls[: -len(method) - 1] if cls.endswith("." + method) else cls.rpartition(".")[0]
    return cls, method


class Maven(Runner):
    name = "maven"
    title = "Maven Surefire (JUnit XML)"

    def detects(self, argv: Sequence[str]) -> bool:
        return bool(argv) and program_name(argv[0]) in ("mvn", "mvnw", "mvnw.cmd")

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        own = [a for a in argv[1:] if not a.startswith(("-Dtest=", "-Dit.test="))]
        if ids is not None:
            self.check_selection(ids)
            by_class: dict[str, list[str]] = {}
            for test_id in ids:
                cls, method = _class_and_method(test_id)
                by_class.setdefault(cls, [])
                if method not in by_class[cls]:
                    by_class[cls].append(method)
            spec = ",".join(f"{cls}#{'+'.join(methods)}" for cls, methods in sorted(by_class.items()))
            own += [f"-Dtest={spec}", "-Dsurefire.failIfNoSpecifiedTests=false"]
        return Invocation(argv=(argv[0], *own), collect=("target/surefire-reports", "*/target/surefire-reports"))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_reports(observed, what="Maven Surefire")

    def source_names(self, test_id: str) -> list[str]:
        return [method_name(test_id)]


class Gradle(Runner):
    name = "gradle"
    title = "Gradle (JUnit XML)"

    def detects(self, argv: Sequence[str]) -> bool:
        return bool(argv) and program_name(argv[0]) in ("gradle", "gradlew")

    def invocation(self, argv: Sequence[str], ids: Sequence[str] | None = None) -> Invocation:
        own, i = [], 1
        while i < len(argv):
            if argv[i] == "--tests" and ids is not None:
                i += 2
                continue
            own.append(argv[i])
            i += 1
        if ids is not None:
            self.check_selection(ids)
            for test_id in ids:
                cls, method = _class_and_method(test_id)
                own += ["--tests", f"{cls}.{method}"]
        return Invocation(argv=(argv[0], *own), collect=("build/test-results", "*/build/test-results"))

    def parse(self, observed: Observed) -> dict[str, str]:
        return parse_reports(observed, what="Gradle")

    def source_names(self, test_id: str) -> list[str]:
        return [method_name(test_id)]


MAVEN = Maven()
GRADLE = Gradle()
