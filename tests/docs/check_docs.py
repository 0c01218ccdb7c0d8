#!/usr/bin/env python3
"""Keeps README.md and docs/*.md true to the code (standard library only).

  check_docs.py --hsring BUILD/src/cli/hsring [--root SOURCE_ROOT]

Checks, each failure printed as FILE:LINE: what is wrong:
  1. every `hsring ...` command quoted in README.md or docs/*.md (a line of a code fence or of an
     indented code block starting with `hsring ` or `$ hsring `, or an inline code span starting
     with `hsring `) names a command the built `hsring` has (`hsring --help` lists them), and
     every --flag it uses appears in that command's help. A command whose help shows a fixed
     second word (`hsring config check`, `ring rm`, `ledger verify`, `data generate`) must be
     quoted with that word. Not every subcommand accepts --help (`hsring config check --help`
     reads a config named --help), so the help text is whatever `hsring CMD --help` and `hsring
     CMD SUB --help` print on stdout or stderr, whatever their exit status. `hsring model SUB` execs
     hsring-model: SUB must be one of the subcommands `hsring model --help` lists, and its flags
     are looked up in that subcommand's paragraph there plus what `hsring model SUB --help`
     prints (the usage line of its "unknown option --help" error). Placeholders (RUN_DIR, ...)
     are not checked.
  2. every config key named as `[section] key` in an inline code span (also `[section] a, b` and
     `[section] key = value`), and every key under a [section] header inside a ```toml fence,
     exists in config/reference.toml (keys written there commented out, `# key = ...`, count:
     they are documented keys without a default).
  3. every relative markdown link of README.md, docs/*.md and BENCHMARKS.md names a file or folder
     that exists; in README.md and docs/*.md a #anchor must name a heading of the linked file.
  4. every repository path named in those files' prose and code spans, and in the comments of the
     sources (src/, include/, tests/, bench/, bin/, config/: `//` and `#` comment lines), exists
     (a path is a word starting src/ include/ tests/ bench/ bin/ docs/ config/; placeholders such
     as <type>, X, * or {a,b} are not checked), and nothing cites DESIGN.md, a file that is not in
     the repository (the invariants are in docs/architecture.md).
Exit 0 when all hold, 1 when not, 2 on a usage error, 77 (skipped) on a Python without tomllib.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    print("check_docs: skipped: this Python has no tomllib (3.11+ needed)", file=sys.stderr)
    sys.exit(77)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
KEY = re.compile(r"^[a-z_][a-z0-9_]*$")
SECTION_KEY = re.compile(r"^\[([a-z_][a-z0-9_]*)\]\s+(.+)$", re.S)


class Doc:
    """A markdown file split into fenced blocks, indented code lines, inline code spans and prose."""

    def __init__(self, path: Path, rel: str):
        self.rel = rel
        self.lines = path.read_text(encoding="utf-8").split("\n")
        self.fences = []  # (info, [(line_no, text), ...])
        self.indented = []  # (line_no, text) of indented code blocks
        masked = []  # the text with fences and indented code blanked (line numbers kept)
        fence, fence_info, body = None, "", []
        prev_blank, in_indented = True, False
        for n, line in enumerate(self.lines, 1):
            if fence:
                if re.match(r"^ {0,3}" + re.escape(fence[0]) + r"{%d,}\s*$" % len(fence), line):
                    self.fences.append((fence_info, body))
                    fence, body = None, []
                else:
                    body.append((n, line))
                masked.append("")
                continue
            m = FENCE.match(line)
            if m:
                fence, fence_info, body = m.group(1), m.group(2).lower(), []
                masked.append("")
                prev_blank, in_indented = False, False
                continue
            blank = not line.strip()
            if not blank and line.startswith("    ") and (prev_blank or in_indented):
                in_indented = True
                self.indented.append((n, line))
                masked.append("")
            else:
                if not blank:
                    in_indented = False
                masked.append(line)
            prev_blank = blank
        if fence:
            self.fences.append((fence_info, body))
        self.masked = "\n".join(masked)
        self.spans = list(self._code_spans())  # (line_no, text)
        prose = self.masked
        for start, end in self._span_ranges:
            prose = prose[:start] + re.sub(r"[^\n]", " ", prose[start:end]) + prose[end:]
        self.prose = prose

    def line_of(self, offset: int) -> int:
        return self.masked.count("\n", 0, offset) + 1

    def _code_spans(self):
        text, i = self.masked, 0
        self._span_ranges = []
        while True:
            m = re.compile(r"`+").search(text, i)
            if not m:
                return
            ticks = m.group(0)
            close = re.compile(r"(?<!`)" + re.escape(ticks) + r"(?!`)").search(text, m.end())
            if not close or re.search(r"\n\s*\n", text[m.end():close.start()]):
                i = m.end()  # a literal backtick run
                continue
            content = text[m.end():close.start()].replace("\n", " ")
            if content.startswith(" ") and content.endswith(" ") and content.strip():
                content = content[1:-1]
            self._span_ranges.append((m.start(), close.end()))
            yield self.line_of(m.start()), content
            i = close.end()


class Checker:
    def __init__(self, root: Path, hsring: Path):
        self.root, self.hsring = root, hsring
        self.errors = []
        self._help = {}
        self._headings = {}
        self.counted = {"commands": 0, "keys": 0, "links": 0, "paths": 0}

    def fail(self, doc: Doc, line: int, msg: str):
        self.errors.append(f"{doc.rel}:{line}: {msg}")

    # -- 1. hsring command lines ------------------------------------------------------------

    def help_text(self, words):
        key = tuple(words)
        if key not in self._help:
            try:
                r = subprocess.run([str(self.hsring), *words, "--help"], capture_output=True, text=True,
                                   timeout=120, stdin=subprocess.DEVNULL)
                self._help[key] = r.stdout + r.stderr
            except (OSError, subprocess.TimeoutExpired) as e:
                self._help[key] = f"<could not run {self.hsring} {' '.join(words)} --help: {e}>"
        return self._help[key]

    def commands(self):
        out = self.help_text([])
        names = set()
        listing = False
        for line in out.splitlines():
            if line.strip() == "commands:":
                listing = True
            elif listing:
                m = re.match(r"^  (\S+)", line)
                if m:
                    names.add(m.group(1))
                elif line.strip():
                    listing = False
        return names

    @staticmethod
    def model_sections(text):
        """hsring-model's usage: `  NAME ...` at two spaces starts a subcommand's paragraph."""
        sections, name = {}, None
        for line in text.splitlines():
            m = re.match(r"^  ([a-z][a-z-]*)(\s|$)", line)
            if m:
                name = m.group(1)
                sections[name] = sections.get(name, "") + line + "\n"
            elif name and (line.startswith("   ") or not line.strip()):
                sections[name] += line + "\n"
            else:
                name = None
        return sections

    def check_command(self, doc: Doc, line: int, cmd: str):
        words = cmd.split()
        assert words[0] == "hsring"
        args = words[1:]
        flags = FLAG.findall(" ".join(args))
        positional = [w for w in args if not w.startswith(("-", "["))]
        if not args or args[0].startswith("-"):
            help_text, where = self.help_text([]), "hsring --help"
        else:
            top = self.commands()
            if not top:
                self.fail(doc, line, f"`{self.hsring} --help` listed no commands: {self.help_text([])[:200]!r}")
                return
            sub = args[0]
            if sub not in top:
                self.fail(doc, line, f"`{cmd}`: hsring has no command '{sub}' (hsring --help lists: "
                                     f"{', '.join(sorted(top))})")
                return
            h1 = self.help_text([sub])
            second = positional[1] if len(positional) > 1 and positional[0] == sub else None
            placeholder = second is None or not re.match(r"^[a-z][a-z-]*$", second)
            if sub == "model":
                sections = self.model_sections(h1)
                if not sections:
                    self.fail(doc, line, f"`{cmd}`: `hsring model --help` listed no subcommands (is "
                                         f"hsring-model built?): {h1.strip()[:300]!r}")
                    return
                if placeholder:
                    help_text, where = h1, "hsring model --help"
                elif second not in sections:
                    self.fail(doc, line, f"`{cmd}`: hsring model has no subcommand '{second}' (hsring model "
                                         f"--help lists: {', '.join(sorted(sections))})")
                    return
                else:
                    help_text = sections[second] + self.help_text([sub, second])
                    where = f"`hsring model --help` ({second}'s paragraph) and `hsring model {second} --help`"
            else:
                subwords = set(re.findall(r"hsring " + re.escape(sub) + r" ([a-z][a-z-]*)\b", h1))
                if subwords and not placeholder:
                    if second not in subwords:
                        self.fail(doc, line, f"`{cmd}`: hsring {sub} has no subcommand '{second}' (hsring "
                                             f"{sub} --help: {', '.join(sorted(subwords))})")
                        return
                    help_text = h1 + self.help_text([sub, second])
                    where = f"`hsring {sub} --help` and `hsring {sub} {second} --help`"
                else:
                    help_text, where = h1, f"`hsring {sub} --help`"
        known = set(FLAG.findall(help_text)) | {"--help"}
        for f in dict.fromkeys(flags):
            if f not in known:
                self.fail(doc, line, f"`{cmd}`: {f} is not an option of this command (not in {where})")

    def command_lines(self, doc: Doc):
        """(line, command) for every quoted hsring command of the file."""
        def strip_comment(s):
            return re.split(r"\s#", s, maxsplit=1)[0].strip()

        for _, body in doc.fences:
            i = 0
            while i < len(body):
                n, text = body[i]
                s = text.strip()
                if s.startswith("$ "):
                    s = s[2:]
                if s.startswith("hsring "):
                    cmd = strip_comment(s)
                    # continuation lines: `\` at the end, or an indented line of [--options]
                    while i + 1 < len(body):
                        nxt = body[i + 1][1].strip()
                        if cmd.endswith("\\") or nxt.startswith(("[", "--")):
                            cmd = cmd.rstrip("\\").rstrip() + " " + strip_comment(nxt)
                            i += 1
                        else:
                            break
                    yield n, cmd
                i += 1
        for n, text in doc.indented:
            s = text.strip()
            if s.startswith("$ "):
                s = s[2:]
            if s.startswith("hsring "):
                yield n, strip_comment(s)
        for n, text in doc.spans:
            s = text.strip()
            if s.startswith("$ "):
                s = s[2:]
            if s.startswith("hsring "):
                yield n, " ".join(s.split())

    # -- 2. config keys ---------------------------------------------------------------------

    def reference_keys(self):
        ref = self.root / "config" / "reference.toml"
        with ref.open("rb") as f:
            data = tomllib.load(f)
        keys = {s: set(t) for s, t in data.items() if isinstance(t, dict)}
        section = None
        for line in ref.read_text(encoding="utf-8").splitlines():
            m = re.match(r"^\[([A-Za-z0-9_]+)\]", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r"^#\s*([a-z_][a-z0-9_]*)\s*=", line)
            if m and section:
                keys.setdefault(section, set()).add(m.group(1))
        return keys

    def check_key(self, doc, line, keys, section, key, quoted):
        self.counted["keys"] += 1
        if section not in keys:
            self.fail(doc, line, f"{quoted}: config/reference.toml has no section [{section}] "
                                 f"(it has: {', '.join(sorted(keys))})")
        elif key is not None and key not in keys[section]:
            self.fail(doc, line, f"{quoted}: config/reference.toml has no key '{key}' in [{section}] "
                                 f"(it has: {', '.join(sorted(keys[section]))})")

    def check_keys(self, doc: Doc, keys):
        for n, text in doc.spans:
            m = SECTION_KEY.match(text.strip())
            if not m:
                continue
            section, rest = m.group(1), m.group(2).split("=", 1)[0]
            names = [k.strip() for k in rest.split(",")]
            if not names or not KEY.match(names[0]):
                continue  # `[section]` followed by prose, not a key
            for k in names:
                if KEY.match(k):
                    self.check_key(doc, n, keys, section, k, f"`{text.strip()}`")
        for info, body in doc.fences:
            if info != "toml":
                continue
            section = None
            for n, text in body:
                m = re.match(r"^\s*\[([A-Za-z0-9_]+)\]\s*(#.*)?$", text)
                if m:
                    section = m.group(1)
                    self.check_key(doc, n, keys, section, None, f"[{section}]")
                    continue
                m = re.match(r"^\s*([A-Za-z0-9_-]+)\s*=", text)
                if m and section:
                    self.check_key(doc, n, keys, section, m.group(1), f"[{section}] {m.group(1)}")

    # -- 3. links ---------------------------------------------------------------------------

    def headings(self, path: Path):
        if path not in self._headings:
            slugs, fence = set(), False
            for line in path.read_text(encoding="utf-8").splitlines():
                if FENCE.match(line):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    title = re.sub(r"`|\*|_(?=\w)|(?<=\w)_|\[|\]\([^)]*\)", "", m.group(1))
                    slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
                    base, i = slug, 1
                    while slug in slugs:
                        slug = f"{base}-{i}"
                        i += 1
                    slugs.add(slug)
            self._headings[path] = slugs
        return self._headings[path]

    def check_links(self, doc: Doc, path: Path, anchors: bool):
        for m in LINK.finditer(doc.prose):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            n = doc.line_of(m.start())
            self.counted["links"] += 1
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                self.fail(doc, n, f"link ({target}): {file_part} does not exist "
                                  f"(relative to {path.parent.relative_to(self.root) or '.'}/)")
                continue
            if anchors and anchor and dest.suffix == ".md" and anchor not in self.headings(dest):
                self.fail(doc, n, f"link ({target}): {dest.relative_to(self.root)} has no heading "
                                  f"#{anchor}")

    # -- 4. paths named in docs and comments -----------------------------------------------

    PATH = re.compile(r"(?<![\w/.$-])((?:src|include|tests|bench|bin|docs|config)/[\w./+-]*[\w/])")
    PLACEHOLDER = re.compile(r"[<>*{}]|(?:^|/)(?:[A-Z][A-Z0-9_]*|X|N)(?:/|\.|$)")
    SOURCES = ("src", "include", "tests", "bench", "bin", "config")
    C_COMMENT = re.compile(r"^\s*//(.*)$|\s//\s(.*)$")
    HASH_COMMENT = re.compile(r"^\s*#(.*)$|\s#\s(.*)$")

    def check_path_words(self, where: str, line: int, text: str):
        if "DESIGN.md" in text:
            self.errors.append(f"{where}:{line}: cites DESIGN.md, which is not in the repository: cite the "
                               "invariant in docs/architecture.md (## Invariants)")
        for m in self.PATH.finditer(text):
            word = m.group(1).rstrip(".")
            end = m.end(1)
            if end < len(text) and text[end] in "<*{":
                continue  # a placeholder follows (src/model/drafter/<type>/)
            if self.PLACEHOLDER.search(word):
                continue
            self.counted["paths"] += 1
            # A unit named without its suffix (src/kernels/gemv_rows: .cu and .hpp) counts.
            here = self.root / word
            if not here.exists() and not (here.parent.is_dir() and any(here.parent.glob(here.name + ".*"))):
                self.errors.append(f"{where}:{line}: names {word}, which does not exist")

    def check_doc_paths(self, doc: Doc):
        for n, text in enumerate(doc.lines, 1):
            if text.lstrip().startswith("$ ") or text.lstrip().startswith("hsring "):
                continue
            self.check_path_words(doc.rel, n, text)

    def check_comment_paths(self):
        for top in self.SOURCES:
            base = self.root / top
            if not base.is_dir():
                continue
            for f in sorted(base.rglob("*")):
                if not f.is_file() or f.suffix not in (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".build",
                                                        ".toml", "") or "__pycache__" in f.parts:
                    continue
                try:
                    lines = f.read_text(encoding="utf-8").split("\n")
                except (UnicodeDecodeError, OSError):
                    continue
                rel = str(f.relative_to(self.root))
                comment = self.C_COMMENT if f.suffix in (".cpp", ".hpp", ".h", ".cu", ".cuh") else self.HASH_COMMENT
                for n, line in enumerate(lines, 1):
                    m = comment.search(line)
                    if m:
                        self.check_path_words(rel, n, m.group(1) if m.group(1) is not None else m.group(2))

    # -- all --------------------------------------------------------------------------------

    def run(self):
        docs = [self.root / "README.md", *sorted((self.root / "docs").glob("*.md"))]
        missing = [d for d in docs if not d.exists()]
        for d in missing:
            self.errors.append(f"{d.relative_to(self.root)}: missing")
        keys = self.reference_keys()
        for path in docs:
            if not path.exists():
                continue
            doc = Doc(path, str(path.relative_to(self.root)))
            for n, cmd in sorted(self.command_lines(doc)):
                self.counted["commands"] += 1
                self.check_command(doc, n, cmd)
            self.check_keys(doc, keys)
            self.check_links(doc, path, anchors=True)
            self.check_doc_paths(doc)
        bench = self.root / "BENCHMARKS.md"
        if bench.exists():
            self.check_links(Doc(bench, "BENCHMARKS.md"), bench, anchors=False)
            self.check_doc_paths(Doc(bench, "BENCHMARKS.md"))
        self.check_comment_paths()
        return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hsring", required=True, type=Path, help="the built hsring executable")
    ap.add_argument("--root", default=Path(__file__).resolve().parents[2], type=Path,
                    help="the source root (default: two folders above this script)")
    a = ap.parse_args()
    root = a.root.resolve()
    if not (a.hsring.is_file() and a.hsring.stat().st_mode & 0o111):
        print(f"check_docs: {a.hsring} is not an executable (build hsring first)", file=sys.stderr)
        return 2
    c = Checker(root, a.hsring.resolve())
    docs = c.run()
    if c.errors:
        for e in c.errors:
            print(e, file=sys.stderr)
        print(f"check_docs: {len(c.errors)} problem(s) in README.md, docs/*.md, BENCHMARKS.md", file=sys.stderr)
        return 1
    n = c.counted
    print(f"check_docs: ok: {len(docs)} files + BENCHMARKS.md's links; {n['commands']} hsring commands, "
          f"{n['keys']} config keys, {n['links']} relative links, {n['paths']} named paths checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
