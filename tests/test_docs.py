"""README.md and docs/ explain the portal from inside the repository: every link, image and
file they name is a file of this repository, and nothing points outside it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"`([^`\n]+)`")
# A relative file path in backticks: at least a name with an extension we keep in the repo.
FILE_LIKE = re.compile(r"^[\w.\-/]+\.(md|py|toml|yml|yaml|json|txt|cfg|ini|html|css|js|png)$")
PARENT = re.compile(r"(?<![\w.])\.\./[\w.\-/]*")


REPOSITORY_FILE_NAMES = {
    path.name
    for path in ROOT.rglob("*")
    if not {".git", ".venv", "var", "node_modules"} & set(path.relative_to(ROOT).parts)
}


def inside(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


def names(text: str, document: Path) -> list[tuple[str, Path]]:
    """(what ``document`` says, the path it names) for links, file-like code spans and
    every ``../`` path."""
    found = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        path = target.split("#", 1)[0]
        base = ROOT if path.startswith("/") else document.parent
        found.append((target, base / path.lstrip("/")))
    for span in CODE.findall(text):
        token = span.strip()
        if FILE_LIKE.match(token) and not token.startswith("/"):
            # A bare name (`money.py`) is a file somewhere in the repository; a path is
            # from the repository's root.
            found.append((token, ROOT / token))
    for parent in PARENT.findall(text):
        found.append((parent, document.parent / parent))
    return found


def test_it_has_the_documents_the_readme_promises():
    for name in ("rules.md", "architecture.md", "operations.md", "user-guide.md"):
        assert (ROOT / "docs" / name).exists(), name
        assert f"docs/{name}" in (ROOT / "README.md").read_text(), f"README links docs/{name}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_it_names_only_files_of_the_repository(document):
    problems = []
    for said, path in names(document.read_text(), document):
        if not inside(path):
            problems.append(f"{said!r} points outside the repository")
        elif not (path.exists() or ("/" not in said and said in REPOSITORY_FILE_NAMES)):
            problems.append(f"{said!r} names a file the repository does not have")
    assert not problems, f"{document.relative_to(ROOT)}: " + "; ".join(problems)


def test_it_catches_a_path_outside_the_repository():
    """The check itself can fail: a document naming notes beside the repository is caught."""
    text = "See `../shared/DESIGN.md` and [the notes](../../shared/SCENARIOS.md)."
    said = [s for s, path in names(text, ROOT / "docs" / "probe.md") if not inside(path)]
    assert "../shared/DESIGN.md" in said
    assert "../../shared/SCENARIOS.md" in said
