from pathlib import Path

from preheat.report.markdown import write_section


def test_sections_are_replaced_in_place_and_others_kept(tmp_path: Path):
    path = tmp_path / "benchmarks.md"
    write_section(path, "a", "first A")
    write_section(path, "b", "first B")
    write_section(path, "a", "second A")
    text = path.read_text()
    assert "first A" not in text
    assert text.index("second A") < text.index("first B")
    assert text.count("<!-- bench:a -->") == 1
    assert text.startswith("# Benchmarks")
