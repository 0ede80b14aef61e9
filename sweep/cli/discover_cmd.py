from __future__ import annotations

from pathlib import Path

import click

from sweep.cli.common import next_step


@click.command("discover")
@click.argument("repo", metavar="OWNER/REPO")
@click.option("--out", "-o", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The candidates file to write (TOML [[candidates]] tables); an existing one is resumed.")
@click.option("--rules", "rules_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A TOML file whose [discover] table (or top level) holds the rules below; options given "
                   "on the command line replace its values.")
@click.option("--max-files", type=click.IntRange(min=1), default=None, help="Leave out PRs changing more files.")
@click.option("--max-changed-lines", type=click.IntRange(min=1), default=None,
              help="Leave out PRs with more added + deleted lines.")
@click.option("--include", multiple=True, metavar="GLOB", help="Some source change must match (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Files left out of every count (repeatable).")
@click.option("--language", "languages", multiple=True, metavar="LANG",
              help="Some source change must be in this language: python, go, rust, javascript, typescript, java.")
@click.option("--linked-issue", is_flag=True, default=None, help="Keep only PRs whose body says 'fixes #N'.")
@click.option("--base-branch", default=None, help="Keep only PRs merged into this branch.")
@click.option("--skip", "skip_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PRs to leave out, one a line (URL, OWNER/REPO#N or N).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Stop once this many are kept in all.")
@click.option("--max-pages", type=click.IntRange(min=1), default=None,
              help="Read at most this many pages (100 PRs each) in this call.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A file holding the GitHub token (mode 0600); default $SWEEP_GITHUB_TOKEN_FILE, else $GITHUB_TOKEN.")
@click.option("--max-wait", "max_wait_s", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Seconds to wait in all for GitHub's rate limit and for 5xx answers before stopping (resumable).")
def discover(repo: str, out: Path, rules_file: Path | None, max_files: int | None, max_changed_lines: int | None,
             include: tuple[str, ...], exclude: tuple[str, ...], languages: tuple[str, ...],
             linked_issue: bool | None, base_branch: str | None, skip_file: Path | None, limit: int | None,
             max_pages: int | None, token_file: Path | None, max_wait_s: float) -> None:
    """Find merged pull requests of OWNER/REPO that change both code and tests, as plan candidates.

    Pages through the repository's closed pull requests newest first, keeps the merged ones that
    change at least one test file and one source file and pass the rules, and writes them to OUT as
    [[candidates]] tables for a plan. Running it again with the same repository and rules resumes
    from the next page; candidates already in OUT are never listed twice. GitHub's rate limit is
    waited out (up to --max-wait) and 5xx answers are retried with backoff.
    """
    import dataclasses
    from typing import Any

    from runstate.errors import ConfigError
    from sweep import textsafe
    from sweep.controller.intake import GithubSettings
    from sweep.credentials import secret_file_problem
    from sweep.discover import GithubClient, Rules, discover as run_discover, parse_repo, read_skip_list, state_path

    rules = Rules.from_toml(rules_file) if rules_file else Rules()
    given: dict[str, Any] = {"max_files": max_files, "max_changed_lines": max_changed_lines, "include": include or None,
             "exclude": exclude or None, "languages": languages or None, "linked_issue": linked_issue,
             "base_branch": base_branch}
    rules = dataclasses.replace(rules, **{k: v for k, v in given.items() if v is not None})
    owner, name = parse_repo(repo)
    settings = GithubSettings.from_env()
    if token_file is not None:
        problem = secret_file_problem(token_file)
        if problem:
            raise ConfigError(problem, field="--token-file")
        settings = GithubSettings(api_url=settings.api_url, token_file=str(token_file))
    skip = read_skip_list(skip_file, owner, name) if skip_file else set()
    client = GithubClient(settings.api_url, settings.token(), max_wait_s=max_wait_s,
                          echo=lambda line: click.echo(textsafe.line(line)))
    state = run_discover(f"{owner}/{name}", out, rules, client, skip=skip, limit=limit, max_pages=max_pages,
                         echo=lambda line: click.echo(textsafe.line(line)))
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(state.rejected.items())) or "none"
    click.echo(f"{state.kept} candidates in {out} from {state.seen} pull requests seen "
               f"({client.requests} API requests); left out: {rejected}")
    if state.done:
        next_step(f"add the [[candidates]] of {out} to a plan, then `sweep init PLAN --campaign DIR`")
    else:
        next_step(f"run the same command again to go on from page {state.next_page} "
                  f"(state in {state_path(out)})")
