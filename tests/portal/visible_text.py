"""What a person reads on a page, and the English left in it once their own data is set
aside: for the test that every main page reads in Chinese.

The visible text is the text of the page's elements (no script, style or code) and the
attributes a person reads (a tooltip, a placeholder, a label read aloud, a confirmation
question, a button's value). An element marked as another language (the language switch
says "English" in English) is left out. What remains is scanned for runs of Latin words,
after the person's data (names, purposes, comments, model names, instance types …), codes
and figures are set aside, and the technical terms that Chinese interfaces keep in
English.
"""

import re
from html.parser import HTMLParser

# Elements whose content is not text a person reads as words, or is code.
SKIPPED = {"script", "style", "code", "pre", "kbd", "samp", "textarea"}
# Attributes a person reads.
READ_ATTRIBUTES = {"title", "placeholder", "aria-label", "alt", "data-confirm", "data-copied"}
VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}

# Terms Chinese interfaces keep in English (units, protocols, products, file formats).
TECHNICAL = {
    "API",
    "AMI",
    "Authorization",
    "Bearer",
    "AWS",
    "BF16",
    "CPU",
    "CSV",
    "CUDA",
    "EC2",
    "ECDSA",
    "Ed25519",
    "FP16",
    "GB",
    "GiB",
    "GPU",
    "GPUs",
    "HTMX",
    "ID",
    "JSON",
    "Jupyter",
    "JupyterLab",
    "MB",
    "MiB",
    "NVIDIA",
    "NVLink",
    "OpenAPI",
    "PaddlePaddle",
    "PCIe",
    "PDF",
    "PyTorch",
    "RSA",
    "SSH",
    "TB",
    "TensorBoard",
    "TFLOPS",
    "Token",
    "TiB",
    "torch",
    "URL",
    "UTC",
    "vCPU",
    "vCPUs",
    "YAML",
}

LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'’\-]*[A-Za-z]|[A-Za-z]")
# Words are one run while only spaces or light punctuation stand between them.
RUN_GAP = re.compile(r"^[\s,;:'’\"“”()\-/&]*$")
# Tokens that are data, not words: anything with a digit, an @, an underscore, a dot or a
# slash inside it, a hex id, a URL.
DATA_TOKEN = re.compile(r"https?://\S+|\S*\d\S*|\S+@\S+|\S*_\S*|\w+(?:\.\w+)+\S*|\S*/\S+|#\w+")


class _Reader(HTMLParser):
    def __init__(self, page_language: str) -> None:
        super().__init__(convert_charrefs=True)
        self.page_language = page_language
        self.stack: list[tuple[str, bool]] = []  # (tag, hidden from the scan)
        self.texts: list[str] = []

    @property
    def hidden(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        lang = values.get("lang", "").lower()
        hidden = (
            self.hidden
            or tag in SKIPPED
            or (bool(lang) and not lang.startswith(self.page_language[:2]))
        )
        if not hidden:
            for name in READ_ATTRIBUTES & values.keys():
                self.texts.append(values[name])
            if tag == "input" and values.get("type") in ("submit", "button", "reset"):
                self.texts.append(values.get("value", ""))
        if tag not in VOID:
            self.stack.append((tag, hidden))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        # Pop to the matching open element (HTML lets some end tags be left out).
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index][0] == tag:
                del self.stack[index:]
                return

    def handle_data(self, data: str) -> None:
        if not self.hidden and data.strip():
            self.texts.append(data)


def visible_texts(html: str, *, page_language: str = "zh") -> list[str]:
    """The pieces of text a person reads on ``html``."""
    reader = _Reader(page_language)
    reader.feed(html)
    reader.close()
    return [" ".join(text.split()) for text in reader.texts if text.strip()]


def data_pattern(data: list[str]) -> re.Pattern[str]:
    """One pattern for ``data`` (a person's own words and names), longest first, each as
    whole words (the project "vision" is not the end of "provisioning")."""
    alternatives = []
    for value in sorted({v for v in data if v.strip()}, key=len, reverse=True):
        before = r"\b" if re.match(r"\w", value) else ""
        after = r"\b" if re.search(r"\w$", value) else ""
        alternatives.append(f"{before}{re.escape(value)}{after}")
    return re.compile("|".join(alternatives) or r"(?!)")


def english_runs(text: str, *, data: re.Pattern[str], allowed: set[str] = TECHNICAL) -> list[str]:
    """The runs of Latin words left in ``text`` once ``data`` (``data_pattern``),
    figures, codes and ``allowed`` terms are set aside."""
    text = data.sub(" ", text)
    text = DATA_TOKEN.sub(" ", text)
    runs: list[str] = []
    current: list[str] = []
    last_end = 0
    for match in LATIN_WORD.finditer(text):
        word = match.group()
        keep = len(word) > 1 and word not in allowed
        if current and not RUN_GAP.match(text[last_end : match.start()]):
            runs.append(" ".join(current))
            current = []
        if keep:
            current.append(word)
        elif current:
            runs.append(" ".join(current))
            current = []
        last_end = match.end()
    if current:
        runs.append(" ".join(current))
    return runs
