"""Rules of the config tree itself."""

from __future__ import annotations

import yaml

from alpha_rl import paths


def _option_files():
    for path in sorted(paths.conf_dir().glob("*/*.yaml")):
        yield path.parent.name, path


def test_groups_declare_isv_slots_only_under_their_own_name() -> None:
    # the ISV validator names a slot's config group from this key: it must be the group's name
    for group, path in _option_files():
        data = yaml.safe_load(path.read_text()) or {}
        slots = (data.get("isv") or {}).get("slots") or {}
        assert set(slots) <= {group}, (
            f"{path}: slots under {sorted(slots)}, expected only {group!r}"
        )


def test_defaults_lists_hold_no_yaml_booleans() -> None:
    # `her: on` would be the boolean True, not the option 'on'
    for path in [paths.conf_dir() / "train.yaml", *(p for _, p in _option_files())]:
        data = yaml.safe_load(path.read_text()) or {}
        for entry in data.get("defaults", []):
            values = entry.values() if isinstance(entry, dict) else [entry]
            assert not any(isinstance(v, bool) for v in values), (
                f"{path}: unquoted on/off in {entry}"
            )


def test_every_documented_group_exists() -> None:
    conf = paths.conf_dir()
    for group in (
        "backend",
        "market",
        "env",
        "agent",
        "replay",
        "reward",
        "beta",
        "her",
        "isv",
        "tracking",
        "audit",
        "kill_criteria",
        "debug",
    ):
        assert (conf / group).is_dir(), group
