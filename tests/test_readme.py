"""README's "What you should see" is what the default configuration prints: the test runs it
(python -m alpha_rl.train, no overrides, as `make train` does) and compares its last progress line
and its summary with the block `make readme` wrote, in README.md and in docs/getting-started.md.
Only what differs by nature from run to run is masked: the output directory's time stamp, steps/s
and the eta."""

from __future__ import annotations

from pathlib import Path

import pytest

from alpha_rl.docsite.readme import block, default_run, masked, pages, readme_lines, shown, write


@pytest.mark.slow
def test_the_default_run_ends_as_the_readme_says(tmp_path: Path) -> None:
    lines, _, run_dir = default_run(tmp_path)
    assert (run_dir / "curves.png").is_file()
    for page in pages():
        assert masked(readme_lines(page)) == masked(lines), (
            f"{page.name} differs from the default run: run `make readme`"
        )


def test_the_block_masks_only_what_changes_between_runs(tmp_path: Path) -> None:
    """Two runs' lines that differ only in the directory, steps/s and eta compare equal; a figure
    that moved does not."""
    log = [
        "[2026-12-03 04:10:17,456][alpha_rl][INFO] - starting",
        "step 1900/2000 [######################..]  36.0 steps/s  l_q 0.9666  eta 3s",
        "run FINISHED after 2000 steps: outputs/2026-12-01/12-30-05",
        "held-out, the last evaluation (step 2000): pnl +444 USD in all",
        "curves: outputs/2026-12-01/12-30-05/curves.png",
        "mlflow: run abc",
    ]
    first = shown(log)
    assert first == log[1:5]
    other = [line.replace("36.0", "3.1").replace("3s", "290s")
             .replace("outputs/2026-12-01/12-30-05", "/tmp/x/outputs/2026-12-03/04-11-59")
             for line in first]  # fmt: skip
    assert masked(other) == masked(first)
    assert masked([first[0].replace("0.9666", "0.9667")]) != masked(first[:1])
    page = tmp_path / "README.md"
    page.write_text(f"# x\n\n{block([], 1.0)}\n\nafter\n")
    write(page, first, 75.0)
    assert readme_lines(page) == first and page.read_text().endswith("\n\nafter\n")
    assert "(it took 1 min 15 s on" in " ".join(page.read_text().split())
