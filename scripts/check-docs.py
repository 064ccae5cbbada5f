#!/usr/bin/env python3
"""Builds the book and checks the links of the README and the book.

  scripts/check-docs.py [--no-build]

Builds docs/ with mdbook (an error, or a chapter SUMMARY.md names that does not exist, fails),
then checks every relative Markdown link in README.md, docs/src/ and charts/*/README.md: the
file it names must exist in the repository, and a `#fragment` must be a heading of the file
it points to (slugged as mdBook and GitHub slug them). Every page under docs/src/ must be in
SUMMARY.md, so none is left out of the book. Exit 1 on any problem, each printed as
`FILE:LINE: problem`.
"""

import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading):
    """A heading's anchor as mdBook and GitHub make it: lower case, markup and punctuation
    dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_lines(path):
    """The file's lines outside fenced code blocks, with their numbers."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                yield number, line


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in markdown_lines(path):
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def pages():
    files = [os.path.join(ROOT, "README.md")]
    for base, _, names in os.walk(os.path.join(ROOT, "docs", "src")):
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith(".md")]
    charts = os.path.join(ROOT, "charts")
    for name in sorted(os.listdir(charts)):
        readme = os.path.join(charts, name, "README.md")
        if os.path.exists(readme):
            files.append(readme)
    return files


def check_links():
    problems = []
    for page in pages():
        rel = os.path.relpath(page, ROOT)
        for number, line in markdown_lines(page):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                path, _, fragment = target.partition("#")
                dest = page if not path else os.path.normpath(os.path.join(os.path.dirname(page), path))
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{number}: link to {target}: no such file")
                elif fragment and dest.endswith(".md") and fragment not in anchors(dest):
                    problems.append(f"{rel}:{number}: link to {target}: no heading '#{fragment}' there")
    return problems


def check_summary():
    src = os.path.join(ROOT, "docs", "src")
    with open(os.path.join(src, "SUMMARY.md"), encoding="utf-8") as f:
        listed = {os.path.normpath(t) for t in re.findall(r"\]\(([^)#]+\.md)\)", f.read())}
    problems = []
    for base, _, names in os.walk(src):
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(base, name), src)
            if name.endswith(".md") and rel != "SUMMARY.md" and rel not in listed:
                problems.append(f"docs/src/{rel}:1: not in docs/src/SUMMARY.md, so not in the book")
    return problems


def build():
    cargo_home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    mdbook = shutil.which("mdbook") or os.path.join(cargo_home, "bin", "mdbook")
    if not os.path.exists(mdbook):
        return ["mdbook not found: cargo install mdbook --locked (scripts/install-test-deps.sh does)"]
    out = os.path.join(ROOT, "target", "book")
    run = subprocess.run([mdbook, "build", os.path.join(ROOT, "docs"), "--dest-dir", out],
                         capture_output=True, text=True)
    if run.returncode != 0 or "ERROR" in run.stderr:
        return [f"docs/book.toml:1: mdbook build failed:\n{run.stderr}"]
    print(f"check-docs: the book is in {os.path.relpath(out, ROOT)}/index.html")
    return []


def main():
    problems = [] if "--no-build" in sys.argv[1:] else build()
    problems += check_summary() + check_links()
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-docs: {len(pages())} pages, every link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
