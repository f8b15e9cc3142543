"""docs/reference/configuration.md from conf/: every group, its options and every key of each,
with the key's default, its comment in the YAML and the type and range the config readers check.

`python -m alpha_rl.docsite.config_reference [--check]` writes the page (or, with --check, exits 1
when the page differs from what conf/ and the readers give now: a test runs it).

The type and range come from the readers themselves (`alpha_rl.settings`): the default config,
every option of every group and every experiment preset are composed and parsed with the readers
recording what they check. A key no reader of `alpha_rl.settings` checks (the market's and the
tracking keys have readers of their own, and some keys are Hydra's or ISV slots) shows the type
of its value and "-" for the range.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir

from alpha_rl import paths, settings
from alpha_rl.commands import module_command
from alpha_rl.errors import AlphaRlError

PAGE = Path("docs/reference/configuration.md")
SKIPPED_DIRS = ("hydra",)  # Hydra's own launcher and sweeper configs (docs/cluster.md)
# groups that need another choice to compose (reward_variant picks a reward and a beta)
COMPANIONS = {("beta", "active"): ["reward=stride7"], ("beta", "active_controller"):
              ["reward=stride7"], ("market", "file"): ["market.path=quotes.csv"]}  # fmt: skip
_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.]*)\s*:(.*)$")


@dataclass
class Entry:
    """One key of one option file."""

    key: str  # as composed: reward.ema_alpha
    value: str  # as written in the file
    comment: str


def _split_comment(rest: str) -> tuple[str, str]:
    """`value  # comment` -> (value, comment), a # inside quotes kept in the value."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1 :].strip()
    return rest.strip(), ""


def entries(path: Path, prefix: str) -> list[Entry]:
    """The keys of a YAML option file in order, nested ones dotted, each with the comment on its
    line or the comment lines just above it; the defaults list and hydra: are left out."""
    out: list[Entry] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the open mappings
    above: list[str] = []
    skip_indent: int | None = None
    head = True  # the file's leading comment block (until a blank line) describes the file
    # the indent of the last key whose line ends in a comment: an indented comment line right
    # after it (further in than that key) goes on with that comment
    continued = -1
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if 0 <= continued < line.index("#") and out:
                out[-1].comment = f"{out[-1].comment} {stripped.lstrip('#').strip()}"
            elif not head:
                above.append(stripped.lstrip("#").strip())
            continue
        head = False
        if not stripped:
            above, continued = [], -1
            continue
        m = _KEY.match(line)
        if not m:  # a list item or a continued value
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        if skip_indent is not None and indent > skip_indent:
            continue
        skip_indent = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, comment = _split_comment(rest)
        continued = indent if comment else -1
        if not stack and key in ("defaults", "hydra"):
            skip_indent, above = indent, []
            continue
        full = ".".join([*(k for _, k in stack), key])
        full = f"{prefix}.{full}" if prefix else full
        text = " ".join([*above, comment]).strip()
        above = []
        if value:
            out.append(Entry(full, value, text))
        else:  # a mapping opens
            if text:
                out.append(Entry(full, "", text))
            stack.append((indent, key))
    return out


def description(path: Path) -> str:
    """The comment block an option file starts with (its `# @package` line apart)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.strip().startswith("#"):
            break
        if not line.strip().startswith("# @package"):
            lines.append(line.strip().lstrip("#").strip())
    return " ".join(lines)


def composition(path: Path) -> list[str]:
    """What an option file composes (its defaults list, `_self_` apart) and what it sweeps
    (hydra.sweeper.params), as lines of the page."""
    data = yaml.safe_load(path.read_text()) or {}
    out = []
    parts = []
    for entry in data.get("defaults") or []:
        if isinstance(entry, dict):
            parts += [f"`{k}: {v}`" for k, v in entry.items()]
        elif entry != "_self_":
            parts.append(f"`{entry}`")
    if parts:
        out.append(f"Composes {', '.join(parts)}.")
    params = ((data.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    if params:
        out.append("Sweeps " + ", ".join(f"`{k}: {v}`" for k, v in params.items()) + ".")
    return out


OWN_COMMAND = {
    "kill_criteria": "`alpha-rl-kill-check` reads these itself: give them to it as `key=value` "
    "(`alpha-rl-kill-check --sweep <dir> window=0.5`).",
}


def package_of(path: Path, group: str) -> str:
    """The key prefix of an option file: its group, unless it says `# @package _global_` or it
    is a command's own settings (OWN_COMMAND)."""
    head = path.read_text().splitlines()[:3]
    if group in OWN_COMMAND or any("@package _global_" in line for line in head):
        return ""
    return group.replace("/", ".")


def checked_keys() -> dict[str, tuple[str, str, str]]:
    """{key: (type, range, file)} from parsing the default config, each group option and each
    preset with the readers recording."""
    from alpha_rl.pipeline.configure.config import plan_run

    conf = paths.conf_dir()
    choices = [[]] + [[f"{d.name}={f.stem}", *COMPANIONS.get((d.name, f.stem), [])]
                      for d in sorted(conf.iterdir()) if d.is_dir() and d.name not in SKIPPED_DIRS
                      for f in sorted(d.glob("*.yaml"))]  # fmt: skip
    seen: dict[str, tuple[str, str, str]] = {}
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for overrides in choices:
            try:
                cfg = compose("train", overrides=["reward.scale=1.0", *overrides])
            except Exception:  # an option that composes only beside another (kill_criteria)
                continue
            # a preset that needs a market file fails part way: what was read before counts
            with settings.recording() as found, contextlib.suppress(AlphaRlError):
                plan_run(cfg)
            for key, how in found.items():
                seen.setdefault(key, how)
    return seen


def _type_of(value: str) -> str:
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return "text"
    if isinstance(parsed, bool):
        return "true / false"
    if isinstance(parsed, int):
        return "whole number"
    if isinstance(parsed, float):
        return "number"
    if isinstance(parsed, list):
        return "list"
    if isinstance(parsed, dict):
        return "mapping"
    if parsed is None:
        return "null"
    return "text"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def page() -> str:
    """The whole reference page."""
    conf = paths.conf_dir()
    checked = checked_keys()
    lines = [
        "# Configuration reference",
        "",
        "Generated from `conf/` by `python -m alpha_rl.docsite.config_reference` (a test fails "
        "when it is stale). Each option file of each group, its keys with the value the file "
        "sets, the type and range the config readers check (when a reader of "
        "`alpha_rl.settings` checks the key; otherwise the type of the value and -), and the "
        "file's comment. Choose an option with `group=option`, a key with `key=value` "
        "(see [Configuration](../configuration.md)).",
        "",
    ]
    top = conf / "train.yaml"
    groups = [("train.yaml (top level)", "", [top])] + [
        (d.name, d.name, sorted(d.rglob("*.yaml")))
        for d in sorted(conf.iterdir())
        if d.is_dir() and d.name not in SKIPPED_DIRS
    ]
    for title, group, files in groups:
        lines += [f"## {title}", ""]
        for path in files:
            rel = path.relative_to(conf)
            sub = str(rel.parent) if group else ""
            option = rel.with_suffix("").as_posix().split("/", 1)[-1] if group else ""
            if group:
                lines += [f"### {group}={option}" if sub == group else f"### {rel.as_posix()}",
                          ""]  # fmt: skip
            rows = entries(path, package_of(path, sub) if group else "")
            said = [description(path)] if group and description(path) else []
            said += composition(path) if group else []
            said += [OWN_COMMAND[group]] if group in OWN_COMMAND else []
            if said:
                lines += [" ".join(said), ""]
            if not rows:
                continue
            lines += ["| key | value | type | range | what it is |", "|---|---|---|---|---|"]
            for e in rows:
                kind, what, _ = checked.get(e.key, (_type_of(e.value) if e.value else "", "-", ""))
                lines.append(f"| `{e.key}` | {_cell(f'`{e.value}`') if e.value else ''} | {kind} "
                             f"| {_cell(what) or '-'} | {_cell(e.comment)} |")  # fmt: skip
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alpha_rl.docsite.config_reference",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    p.add_argument("--out", type=Path, default=paths.project_root() / PAGE)
    args = p.parse_args(argv)
    text = page()
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            out = [] if args.out == paths.project_root() / PAGE else ["--out", str(args.out)]
            again = module_command("alpha_rl.docsite.config_reference", out)
            print(f"{args.out} is stale: run `{again}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
