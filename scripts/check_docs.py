#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check kstage's documentation: its links, the paths it names, and its quick starts.

    python3 scripts/check_docs.py [REPOSITORY_ROOT]

The files checked are README.md, docs/*.md and perf/README.md. For each:

1. Every relative Markdown link ([text](target), ![alt](target) and [label]: target) points
   to a file or folder that exists, relative to the file it is in. A link with a #fragment
   must name a heading of the target Markdown file (or of the file itself, for "#fragment"),
   by GitHub's anchor rules: the heading's text without its Markdown (code backticks, link
   syntax, emphasis), lowercased, with every character that is not a letter, a digit, a space,
   '-' or '_' dropped and each space turned into '-'; a repeated heading gets "-1", "-2", ...
   Links with a scheme (https:, mailto:) are not followed. Links inside code are not links.
2. Every path under scripts/, examples/ or tests/ that appears in backticks (a code span or a
   fenced code block) exists. A path followed by a placeholder ("tests/test_<concept>.cpp",
   "perf/src/wl_*.cpp") is a pattern, not a path, and is skipped.
3. README.md's C quick start (the ```c block under "## C quick start") is the program
   examples/c/minimal/main.c in short: that program is the quick start "as a program that
   builds and runs as a test", with error checks and output the README leaves out, so the two
   are not byte-identical. What must agree is checked instead: every kstage_* call of the
   README block appears in main.c, in the same order (as a subsequence of main.c's calls),
   and every kstage/KSTAGE/DLPack identifier and every struct member the block uses appears in
   main.c. So the README cannot call a function, pass a constant or read a field that the
   tested program does not.
4. README.md has the heading "### Python quick start" with a ```python block right after it
   (tests/python_package/test_readme.py runs that block).
5. README.md's Fortran quick start (the ```fortran block under "## Fortran quick start") is
   exactly examples/fortran/minimal/main.f90 without its leading comment lines: that program
   runs as a test (example_fortran_minimal), so the README shows a program that works.

Each problem is printed on its own line as "file:line: what is wrong"; the exit status is 1 if
there is any, else 0. Python 3 standard library only.
"""
import os
import re
import sys
import unicodedata

CHECKED_PREFIXES = ("scripts", "examples", "tests")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
PATH = re.compile(r"(?<![\w./$<>-])((?:%s)/[A-Za-z0-9_.+/-]*)" % "|".join(CHECKED_PREFIXES))


class Doc:
    """One Markdown file: its text, its fenced blocks, and the text outside them."""

    def __init__(self, root, rel):
        self.rel = rel
        self.path = os.path.join(root, rel)
        with open(self.path, encoding="utf-8") as f:
            self.text = f.read()
        self.lines = self.text.split("\n")
        self.fences = []  # (first line number, info string, [lines]) of each fenced block
        prose = []
        fence = None
        for number, line in enumerate(self.lines, 1):
            m = FENCE.match(line)
            if fence is None:
                if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                    fence = (m.group(1), number, m.group(2).strip(), [])
                    prose.append("")
                    continue
                prose.append(line)
            else:
                marker = fence[0]
                if m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker) and not m.group(2).strip():
                    self.fences.append((fence[1], fence[2], fence[3]))
                    fence = None
                else:
                    fence[3].append(line)
                prose.append("")
        if fence is not None:
            self.fences.append((fence[1], fence[2], fence[3]))
        # Outside fences; line numbers are kept (a fenced line becomes an empty one).
        self.prose = "\n".join(prose)

    def code_spans(self):
        """(line number, content) of every code span outside fences (not across blank lines)."""
        for m in CODE_SPAN.finditer(self.prose):
            content = m.group(2)
            if re.search(r"\n[ \t]*\n", content):
                continue
            yield self.prose.count("\n", 0, m.start()) + 1, content

    def prose_without_code(self):
        """The prose with each code span blanked out (same length, newlines kept)."""

        def blank(m):
            if re.search(r"\n[ \t]*\n", m.group(2)):
                return m.group(0)
            return re.sub(r"[^\n]", " ", m.group(0))

        return CODE_SPAN.sub(blank, self.prose)

    def anchors(self):
        """GitHub's anchors of every heading outside fences."""
        seen = {}
        out = set()
        for line in self.prose.split("\n"):
            m = HEADING.match(line)
            if not m:
                continue
            slug = anchor_of(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else "%s-%d" % (slug, n))
        return out


def anchor_of(heading):
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # links -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers, not snake_case
    text = text.strip().lower()
    kept = []
    for ch in text:
        if ch == " ":
            kept.append("-")
        elif ch in "-_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept)


def doc_files(root):
    files = ["README.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + f for f in os.listdir(docs) if f.endswith(".md"))
    if os.path.exists(os.path.join(root, "perf", "README.md")):
        files.append("perf/README.md")
    return files


def check_links(root, doc, anchors_of, problems):
    text = doc.prose_without_code()
    targets = []
    for m in LINK.finditer(text):
        targets.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    for number, line in enumerate(text.split("\n"), 1):
        m = REF_DEF.match(line)
        if m:
            targets.append((number, m.group(1)))
    for number, target in targets:
        where = "%s:%d" % (doc.rel, number)
        if not target:
            problems.append("%s: a link with an empty target" % where)
            continue
        if SCHEME.match(target):
            continue
        path, _, fragment = target.partition("#")
        if path:
            if path.startswith("/"):
                problems.append("%s: link '%s' is absolute; use a path relative to %s" % (where, target, doc.rel))
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(doc.path), path))
            if not os.path.exists(resolved):
                problems.append("%s: link '%s': %s does not exist" % (where, target, os.path.relpath(resolved, root)))
                continue
        else:
            resolved = doc.path
        if not fragment:
            continue
        if not resolved.endswith(".md") or os.path.isdir(resolved):
            problems.append("%s: link '%s' has an anchor, but %s is not a Markdown file" % (where, target, os.path.relpath(resolved, root)))
            continue
        anchors = anchors_of(resolved)
        if fragment not in anchors:
            close = sorted(a for a in anchors if a.split("-")[0] == fragment.split("-")[0])
            hint = (" (headings there with the same first word: %s)" % ", ".join("#" + a for a in close)) if close else ""
            problems.append("%s: link '%s': %s has no heading with the anchor '#%s'%s" % (where, target, os.path.relpath(resolved, root), fragment, hint))


def check_paths(root, doc, problems):
    snippets = list(doc.code_spans())
    for first, _, lines in doc.fences:
        for i, line in enumerate(lines):
            snippets.append((first + 1 + i, line))
    reported = set()
    for number, code in snippets:
        for m in PATH.finditer(code):
            path = m.group(1)
            after = code[m.end():m.end() + 1]
            if after in ("<", "*", "{", "$"):
                continue  # a pattern such as tests/test_<concept>.cpp
            path = path.rstrip(".,:;")
            if not os.path.exists(os.path.join(root, path.rstrip("/"))):
                key = (path, number)
                if key not in reported:
                    reported.add(key)
                    problems.append("%s:%d: `%s` is named but does not exist" % (doc.rel, number, path))


def block_under(doc, heading, language):
    """(line number, text) of the first ```language block after `heading`, before the next heading of its level."""
    level = len(heading) - len(heading.lstrip("#"))
    start = None
    for number, line in enumerate(doc.lines, 1):
        if line.strip() == heading:
            start = number
            break
    if start is None:
        return None, None
    for first, info, lines in doc.fences:
        if first <= start:
            continue
        # Stop at the next heading of the same or a higher level.
        between = doc.prose.split("\n")[start:first - 1]
        if any((m := HEADING.match(l)) and len(m.group(1)) <= level for l in between):
            return None, None
        if info.split()[:1] == [language]:
            return first, "\n".join(lines)
        return None, None
    return None, None


def strip_c_comments(code):
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    return re.sub(r"//[^\n]*", " ", code)


def check_c_quick_start(root, readme, problems):
    heading = "## C quick start"
    number, block = block_under(readme, heading, "c")
    if block is None:
        problems.append("README.md: no ```c block under '%s'" % heading)
        return
    example_rel = "examples/c/minimal/main.c"
    try:
        with open(os.path.join(root, example_rel), encoding="utf-8") as f:
            example = f.read()
    except OSError as e:
        problems.append("README.md:%d: the C quick start's program %s cannot be read: %s" % (number, example_rel, e))
        return
    quick = strip_c_comments(block)
    program = strip_c_comments(example)
    where = "README.md:%d" % number
    calls = re.compile(r"\b(kstage_\w+)\s*\(")
    quick_calls = calls.findall(quick)
    program_calls = calls.findall(program)
    pos = 0
    for call in quick_calls:
        try:
            pos = program_calls.index(call, pos) + 1
        except ValueError:
            if call in program_calls:
                problems.append("%s: the C quick start calls %s out of the order of %s (its calls there: %s)"
                                % (where, call, example_rel, " ".join(program_calls)))
            else:
                problems.append("%s: the C quick start calls %s, which %s does not" % (where, call, example_rel))
            break
    ident = re.compile(r"\b((?:kstage|KSTAGE)_\w+|kDL\w+|DL[A-Z]\w*)\b")
    for name in sorted(set(ident.findall(quick)) - set(ident.findall(program))):
        problems.append("%s: the C quick start uses %s, which %s does not" % (where, name, example_rel))
    member = re.compile(r"(?:\.|->)\s*([A-Za-z_]\w*)")
    for name in sorted(set(member.findall(quick)) - set(member.findall(program))):
        problems.append("%s: the C quick start reads the member .%s, which %s does not" % (where, name, example_rel))


def check_python_quick_start(readme, problems):
    heading = "### Python quick start"
    number, block = block_under(readme, heading, "python")
    if block is None:
        problems.append("README.md: no ```python block right after '%s' (tests/python_package/test_readme.py runs it)" % heading)


def check_fortran_quick_start(root, readme, problems):
    heading = "## Fortran quick start"
    program = os.path.join("examples", "fortran", "minimal", "main.f90")
    number, block = block_under(readme, heading, "fortran")
    if block is None:
        problems.append("README.md: no ```fortran block right after '%s'" % heading)
        return
    with open(os.path.join(root, program), encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[0].startswith("!"):
        lines.pop(0)
    expected = "\n".join(lines).strip("\n")
    if block.strip("\n") != expected:
        got = block.strip("\n").split("\n")
        want = expected.split("\n")
        at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        problems.append("README.md:%d: the Fortran quick start differs from %s (its line %d after "
                        "the leading comments): %r" % (number + 1 + at, program, at + 1,
                                                       want[at] if at < len(want) else "(end)"))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    if not os.path.exists(os.path.join(root, "README.md")):
        print("check_docs: %s has no README.md" % root)
        return 1
    problems = []
    docs = [Doc(root, rel) for rel in doc_files(root)]
    cache = {d.path: d for d in docs}

    def anchors_of(path):
        if path not in cache:
            cache[path] = Doc(root, os.path.relpath(path, root))
        doc = cache[path]
        if not hasattr(doc, "_anchors"):
            doc._anchors = doc.anchors()
        return doc._anchors

    for doc in docs:
        check_links(root, doc, anchors_of, problems)
        check_paths(root, doc, problems)
    readme = docs[0]
    check_c_quick_start(root, readme, problems)
    check_python_quick_start(readme, problems)
    check_fortran_quick_start(root, readme, problems)
    for p in problems:
        print(p)
    if problems:
        print("check_docs: %d problem%s in %d files" % (len(problems), "" if len(problems) == 1 else "s", len(docs)))
        return 1
    print("check_docs: %d files, links, paths and quick starts OK" % len(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
