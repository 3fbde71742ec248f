#!/usr/bin/python3
"""Checks README.md and docs/*.md against the repository they describe.

Fails, naming file and line, when a page
  (a) links a relative file or directory that does not exist: markdown links, and repository paths
      in code (`bench/ddp_vs_torch.cpp`, `tools/test.sh`; a bare source file name such as
      `peer_monitor.h` must exist somewhere in the tree);
  (b) links a page or a heading anchor (`ddp.md#limits`) that does not exist;
  (c) names a command-line flag (`--something` in a code span or block) that no non-test source
      file (*.cpp, *.h, *.sh, *.py, CMake) has as a string, unless it is another program's flag
      (OTHER_PROGRAMS_FLAGS below);
  (d) names a strategy, comm hook, callback or logger option key in the `name:key=value` form
      (`ddp:find_unused_parameters=true`, `model_checkpoint:monitor=val_acc`) whose key is no string
      literal of the code that declares such keys (strategies/ and trainer/; callbacks/; loggers/);
  (e) cites a `Note [Name]` that no source file has;
  (f) and fails when a Trainer flag, a key TrainerOptions::schema() declares (SCHEMA_FILES), is named
      in no page: every flag the command line accepts is documented.

Usage: doc_links_test.py [REPOSITORY_ROOT]   (default: two folders above this file)
Standard library only; reads the source tree, never a build tree, so it runs the same in a fresh
clone and under any build directory's CTest (label "docs").
"""
import glob
import os
import re
import sys
import unicodedata

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))

# Flags that belong to other programs. A flag listed here is not looked up in volt's sources, so
# keep each one with the program it belongs to.
OTHER_PROGRAMS_FLAGS = {
    # cmake
    "build", "install", "prefix", "target",
    # ctest
    "test-dir", "output-on-failure",
    # GoogleTest programs (tests/<area>_tests)
    "gtest_filter", "gtest_list_tests",
    # torchrun (python3 -m torch.distributed.run)
    "no_python", "nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port",
    "max_restarts", "redirects", "tee",
    # srun (SLURM)
    "ntasks-per-node",
}
# Flags of the test suite's own helper scripts: looked up in that script only.
TEST_SCRIPT_FLAGS = {
    "unpatched": "tests/ddp/python/comm_hook_reference.py",
}
# First path components that are other projects' include roots, not this repository's folders.
FOREIGN_PATH_ROOTS = {"torch", "c10", "ATen", "gloo", "boost", "nvidia", "fairscale", "lightning"}
SOURCE_EXTENSIONS = (".cpp", ".h", ".sh", ".py", ".cmake")
PATH_EXTENSIONS = (".cpp", ".h", ".sh", ".py", ".cmake", ".proto", ".txt", ".md", ".in")


def is_ignored_top_level(name):
    # Build trees, dependencies and other untracked outputs a fresh clone does not have.
    return name.startswith(".") or name.startswith("build") or name in {"volt_logs", "lightning_logs", "checkpoints"}


def repository_files():
    files = []
    for entry in sorted(os.listdir(ROOT)):
        if is_ignored_top_level(entry):
            continue
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            files.append(entry)
            continue
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = [s for s in subfolders if s != "__pycache__"]
            for name in names:
                files.append(os.path.relpath(os.path.join(folder, name), ROOT))
    return files


FILES = repository_files()
TOP_LEVEL = {f.split(os.sep)[0] for f in FILES if os.sep in f}
BASENAMES = {os.path.basename(f) for f in FILES}


def read(relative):
    with open(os.path.join(ROOT, relative), encoding="utf-8", errors="replace") as f:
        return f.read()


def source_text(predicate):
    return "\n".join(read(f) for f in FILES if predicate(f))


def is_code(f):
    return f.endswith(SOURCE_EXTENSIONS) or os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake.in")


NON_TEST_SOURCE = source_text(lambda f: is_code(f) and not f.startswith("tests" + os.sep))
ALL_SOURCE = source_text(is_code)


def literals_in(*folders):
    text = source_text(lambda f: f.endswith((".cpp", ".h")) and f.split(os.sep)[0] in folders)
    return set(re.findall(r'"([^"\\\n]*)"', text))


STRATEGY_LITERALS = literals_in("strategies", "trainer")
REGISTRIES = [  # (what, the folders whose string literals are its names and keys)
    ("strategy", STRATEGY_LITERALS),
    ("callback", literals_in("callbacks")),
    ("logger", literals_in("loggers")),
]
STRATEGY_NAMES = set(re.findall(r'(?:registry\.add|add_alias)\("([\w]+)"', source_text(lambda f: f.startswith("strategies"))))


# ---- markdown parsing

def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").strip().lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


class Page:
    def __init__(self, relative):
        self.relative = relative
        self.text = read(relative)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        # Fenced code blocks, then inline code spans outside them.
        self.blocks = []  # (start, end) of each block's content
        prose = list(self.text)
        offset, fence_start = 0, None
        for line in self.text.split("\n"):
            if line.lstrip().startswith("```"):
                if fence_start is None:
                    fence_start = offset + len(line) + 1
                else:
                    self.blocks.append((fence_start, offset))
                    fence_start = None
                for i in range(offset, offset + len(line)):
                    prose[i] = " "
            elif fence_start is not None:
                for i in range(offset, offset + len(line)):
                    prose[i] = " "
            offset += len(line) + 1
        masked = "".join(prose)
        self.spans = []  # (start, end) of each inline code span's content
        for m in re.finditer(r"(`+)(.+?)\1", masked, re.S):
            self.spans.append((m.start(2), m.end(2)))
            for i in range(m.start(), m.end()):
                if prose[i] != "\n":
                    prose[i] = " "
        self.prose = "".join(prose)  # the text with every code block and span blanked out
        self.anchors = set()
        seen = {}
        for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", self.prose, re.M):
            base = slug(self.text[m.start(1):m.end(1)])
            n = seen.get(base, 0)
            seen[base] = n + 1
            self.anchors.add(base if n == 0 else f"{base}-{n}")

    def line(self, offset):
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def code(self):
        """(offset, text) of every code span and code block."""
        for start, end in self.blocks + self.spans:
            yield start, self.text[start:end]


ERRORS = []
COUNTS = {"links": 0, "paths": 0, "flags": 0, "option keys": 0, "notes": 0, "trainer flags": 0}
DOCUMENTED_FLAGS = set()  # every flag name a page's code names, braces expanded


def fail(page, offset, message):
    ERRORS.append(f"{page.relative}:{page.line(offset)}: {message}")


PAGES = {}


def page(relative):
    if relative not in PAGES:
        PAGES[relative] = Page(relative)
    return PAGES[relative]


# ---- (a), (b): links

def check_links(p):
    targets = [(m.start(), m.group(1)) for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", p.prose)]
    targets += [(m.start(), m.group(1)) for m in re.finditer(r"^\s*\[[^\]]+\]:\s*(\S+)", p.prose, re.M)]
    for offset, target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        COUNTS["links"] += 1
        path, _, anchor = target.partition("#")
        if path:
            resolved = os.path.normpath(os.path.join(os.path.dirname(p.relative), path))
            if resolved.startswith("..") or not os.path.exists(os.path.join(ROOT, resolved)):
                fail(p, offset, f"link '{target}': {resolved} does not exist in the repository")
                continue
        else:
            resolved = p.relative
        if anchor:
            if not resolved.endswith(".md") or not os.path.isfile(os.path.join(ROOT, resolved)):
                fail(p, offset, f"link '{target}': an anchor into {resolved}, which is not a markdown page")
            elif anchor not in page(resolved).anchors:
                fail(p, offset, f"link '{target}': {resolved} has no heading whose anchor is '#{anchor}'")


def check_paths(p):
    top = "|".join(re.escape(t) for t in sorted(TOP_LEVEL))
    for start, code in p.code():
        for m in re.finditer(r"(?<![\w./$~-])((?:[\w.+-]+/)+[\w.+*-]*)", code):
            path = m.group(1).rstrip(".")
            first = path.split("/")[0]
            if any(c in path for c in "<>{}$") or "..." in path:
                continue
            if re.fullmatch(top, first):
                COUNTS["paths"] += 1
                # A program is named after its source: `bench/ddp_vs_torch` is bench/ddp_vs_torch.cpp.
                candidates = [path] + [path + ext for ext in (".cpp", ".h")]
                matches = glob.glob(os.path.join(ROOT, path)) if "*" in path else \
                    [c for c in candidates if os.path.exists(os.path.join(ROOT, c))]
                if not matches:
                    fail(p, start + m.start(1), f"path '{path}' does not exist in the repository")
            elif path.endswith(SOURCE_EXTENSIONS) and first not in FOREIGN_PATH_ROOTS and not first.startswith("build") \
                    and not first.startswith("."):
                if not any(f.replace(os.sep, "/").endswith("/" + path) for f in FILES):
                    fail(p, start + m.start(1), f"path '{path}' is the end of no file's path in the repository")
        for m in re.finditer(r"(?<![\w/.<>-])([\w-]+\.(?:cpp|h|py|sh|cmake|proto))(?![\w/])", code):
            if m.group(1) not in BASENAMES:
                fail(p, start + m.start(1), f"file '{m.group(1)}' does not exist anywhere in the repository")


# ---- (c): flags

def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alternative in m.group(1).split(",")
            for w in expand_braces(word[:m.start()] + alternative + word[m.end():])]


# What a flag looks like where it is defined: a string "max-epochs" (Boost.Program_options, also
# "help,h" or "name=..."), or --max-epochs itself (argument parsers, shell `case` patterns, messages).
DEFINED_FLAGS = set(re.findall(r"[\"']([A-Za-z][\w-]*)[\"',=]", NON_TEST_SOURCE)) | \
    set(re.findall(r"--([A-Za-z][\w-]*)", NON_TEST_SOURCE))


def flag_is_defined(name):
    return name in DEFINED_FLAGS


def check_flags(p):
    for start, code in p.code():
        for m in re.finditer(r"(?<![\w-])--([A-Za-z][\w{},-]*)", code):
            if code[m.end():m.end() + 1] == "*":  # `--list-*`: some flag starts so
                COUNTS["flags"] += 1
                if not any(f.startswith(m.group(1)) and f != m.group(1) for f in DEFINED_FLAGS):
                    fail(p, start + m.start(), f"no flag starts with '--{m.group(1)}'")
                continue
            for name in expand_braces(m.group(1)):
                name = name.rstrip("-,")
                DOCUMENTED_FLAGS.add(name)
                if name in OTHER_PROGRAMS_FLAGS:
                    continue
                COUNTS["flags"] += 1
                if name in TEST_SCRIPT_FLAGS:
                    script = TEST_SCRIPT_FLAGS[name]
                    if "--" + name not in read(script):
                        fail(p, start + m.start(), f"flag '--{name}' is not in {script}")
                    continue
                if not flag_is_defined(name):
                    fail(p, start + m.start(), f"flag '--{name}' appears in no source file outside tests/ "
                         "(a typo, a removed flag, or another program's: then add it to OTHER_PROGRAMS_FLAGS)")


# ---- (d): option keys

def check_option_keys(p):
    for start, code in p.code():
        for m in re.finditer(r"(?<![\w-])([a-z][a-z0-9_]*):([A-Za-z_][^\s\"'`|]*)", code):
            name, items = m.group(1), m.group(2).split(",")
            for what, literals in REGISTRIES:
                if name not in literals:
                    continue
                for i, item in enumerate(items):
                    key, has_value, _ = item.partition("=")
                    if not re.fullmatch(r"[A-Za-z_]\w*", key):
                        continue
                    if not has_value and not (i == 0 and what == "strategy" and name in STRATEGY_NAMES
                                              and re.fullmatch(r"[a-z_][a-z0-9_]*", key)):
                        continue  # `fsdp:FSDPCheckpoints` is a CTest name, not an option
                    COUNTS["option keys"] += 1
                    if key not in literals:
                        fail(p, start + m.start(), f"{what} '{name}': option key '{key}' is no string literal "
                             f"where {what} options are declared")
                break


# ---- (e): notes

def check_notes(p):
    for m in re.finditer(r"Note \[([^\]]+)\]", p.text):
        name = " ".join(m.group(1).split())
        COUNTS["notes"] += 1
        if not re.search(r"Note \[" + r"\s+".join(re.escape(w) for w in name.split(" ")) + r"\]", ALL_SOURCE):
            fail(p, m.start(), f"Note [{name}] is in no source file")


# ---- (f): every Trainer flag documented

# Where TrainerOptions::schema() declares its keys (Note [Flags from the schema]): each
# `.option("name"`, `.choice("name"` or `.repeated("name"` there is a flag.
SCHEMA_FILES = ["run/run_option_flags.h", "trainer/trainer_options.cpp"]
# The Trainer has about 40 flags; far fewer found means the declarations changed shape and this
# check would pass without looking.
MIN_SCHEMA_FLAGS = 35


def check_schema_flags_documented():
    declared = []
    for relative in SCHEMA_FILES:
        declared += re.findall(r'\.(?:option|choice|repeated)\(\s*"([a-z][a-z0-9-]*)"', read(relative))
    COUNTS["trainer flags"] = len(declared)
    if len(declared) < MIN_SCHEMA_FLAGS:
        ERRORS.append(f"{', '.join(SCHEMA_FILES)}: found {len(declared)} flag declarations, expected at least "
                      f"{MIN_SCHEMA_FLAGS}; update check_schema_flags_documented to how flags are declared")
    for name in declared:
        if name not in DOCUMENTED_FLAGS:
            ERRORS.append(f"the Trainer flag '--{name}' ({' or '.join(SCHEMA_FILES)}) is named in no page "
                          "of README.md or docs/; document it (docs/training_loop.md lists the Trainer's flags)")


def main():
    pages = ["README.md"] + sorted(os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    for relative in pages:
        p = page(relative)
        check_links(p)
        check_paths(p)
        check_flags(p)
        check_option_keys(p)
        check_notes(p)
    check_schema_flags_documented()
    for error in ERRORS:
        print(error)
    if ERRORS:
        print(f"doc_links_test: {len(ERRORS)} problem(s) in {len(pages)} page(s)")
        return 1
    counted = ", ".join(f"{n} {what}" for what, n in COUNTS.items())
    print(f"doc_links_test: {len(pages)} page(s) checked ({counted}), no problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
