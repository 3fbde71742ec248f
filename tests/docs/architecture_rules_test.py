#!/usr/bin/env python3
"""Tests the layering sentences of docs/architecture.md against the code. Each rule quotes the
sentence it enforces; a failure prints `file:line: [rule] what was found -- ... says: "sentence"`.

  layers      a library folder includes only what "## Layers" (the diagram, "What each layer may
              know") allows it; a folder may always include itself
  transports  no file outside distributed/ includes a distributed/transports/ header, but for
              distributed/'s white-box tests (tests/distributed/) and bench/shm_all_reduce
  c10d        no file outside distributed/ includes c10d's headers, itself or through a
              distributed/ header that does (tests/distributed/ and bench/communicator_overhead are
              the doc's exceptions)
  parts       the parts every strategy shares include neither strategies/strategy.h nor
              strategies/parallel_strategy.h, and a strategy's own parts (DDP's checkpoint section,
              FSDP's three) do not include their strategy's header either (Note [Part context])
  columns     no line of the project's own .cpp/.h outside tests/ is longer than 120 columns
  no friend   trainer/trainer.h declares no friend
  lean trainer  trainer/trainer.h includes nothing of strategies/ or distributed/, nor the run's
              internals (loop state and context, run setup, CPU threads)

A self-test runs first: it plants violations of each rule, and allowed look-alikes, in a temporary
tree and requires exactly the planted ones to be reported, so that no rule passes by never firing.

Usage: architecture_rules_test.py [REPOSITORY_ROOT] [--self-test: only that]   (default: two up)
Standard library only; reads the source tree, never a build tree (CTest label "docs").
"""
import os
import re
import subprocess
import sys
import tempfile

DOC = "docs/architecture.md"
LIBRARY = ["trainer", "fabric", "callbacks", "loggers", "run", "strategies", "precision", "distributed", "checkpoint",
           "data", "nn", "core"]
# The sentences each rule enforces, as the doc words them (box-drawing and line breaks aside);
# main() requires every one to be still in the doc, so that a reworded rule is revisited here.
DRAWN = "the library's folders include each other only as drawn"
CORE = "`core/` includes nothing of volt"
GROUND = "`data/`, `checkpoint/`, `nn/` and `loggers/` include only `core/`"
PRECISION = "held by the Strategy; includes data/batch.h (a batch's input dtype)"
DISTRIBUTED = "includes checkpoint/state_dict_bytes.h (per-rank state as bytes)"
STRATEGIES = "It never includes `trainer/`, `fabric/`, `run/`, `callbacks/` or `loggers/`"
FABRIC = "it includes run/ and what lies below, never trainer/, callbacks/ or loggers/"
RUN = "FusedAdamW (optim/); it includes strategies/ and what lies below"
UMBRELLA = "trainer/volt.h, the umbrella header, includes every layer, fabric/ too"
CALLBACKS = "their .cpp files include trainer/trainer.h (the Trainer's public state)"
TRAINER = ("From `distributed/` it uses only the cluster environments, the launcher and plain types "
           "(reduce ops, the process topology), never the Communicator.")
TRANSPORTS = ("transports/: private to distributed/ (and to its white-box tests under tests/distributed/ and "
              "bench/shm_all_reduce)")
C10D = ("Only `distributed/` and its white-box tests (`tests/distributed/`) include c10d's headers "
        "(`bench/communicator_overhead` uses c10d directly as its baseline)")
COLUMNS = "Google's style, 120 columns"
NO_FRIEND = "the Trainer has no friend"
PARTS = "No part can set up, wrap, step or load its strategy, and none holds it"
LEAN_TRAINER = ("keeps the rest of a run (its placement, CPU threads, loop state and context) behind a pointer "
                "in `trainer.cpp`")
# What trainer/trainer.h must not include (LEAN_TRAINER): the strategy and the run's internals.
TRAINER_H_KEEPS_OUT = ["strategies/", "distributed/", "trainer/loops/loop_state.h", "trainer/loops/loop_context.h",
                       "run/run_setup.h", "core/cpu_threads.h"]

# What each library folder may include besides itself: folder prefixes ("core/") or single
# headers, and the sentence that says so. Everyone sits on core/; strategies/ sees what is drawn
# below it; trainer/ sees everything, of distributed/ only what TRAINER lists; callbacks/ reaches
# the Trainer through trainer/trainer.h from its .cpp files (its headers are included by trainer/).
BELOW_STRATEGIES = ["precision/", "distributed/", "checkpoint/", "data/", "nn/", "core/"]
TRAINER_DISTRIBUTED = ["distributed/cluster/", "distributed/process_launcher.h", "distributed/reduce_op.h",
                       "distributed/process_topology.h"]
LAYER_RULES = {
    "core": ([], CORE),
    "data": (["core/"], GROUND),
    "checkpoint": (["core/"], GROUND),
    "nn": (["core/"], GROUND),
    "loggers": (["core/"], GROUND),
    "precision": (["core/", "data/batch.h"], PRECISION),
    "distributed": (["core/", "checkpoint/state_dict_bytes.h"], DISTRIBUTED),
    "strategies": (BELOW_STRATEGIES, STRATEGIES),
    "callbacks.cpp": (["loggers/", "trainer/trainer.h"] + BELOW_STRATEGIES + ["strategies/"], CALLBACKS),
    "callbacks.h": (["loggers/"] + BELOW_STRATEGIES + ["strategies/"], CALLBACKS),
    "trainer": (["callbacks/", "loggers/", "run/", "strategies/", "precision/", "checkpoint/", "data/", "core/"]
                + TRAINER_DISTRIBUTED, TRAINER),
    "trainer/volt.h": ([f + "/" for f in LIBRARY], UMBRELLA),
    "fabric": (["run/", "strategies/"] + BELOW_STRATEGIES, FABRIC),
    "run": (["strategies/"] + BELOW_STRATEGIES, RUN),
}
C10D_HEADERS = "torch/csrc/distributed/c10d/"
C10D_EXCEPTIONS = ["bench/communicator_overhead.", "tests/distributed/"]
TRANSPORTS_EXCEPTIONS = ["tests/distributed/", "bench/shm_all_reduce."]
# The parts every strategy shares (Note [Part context]): they see their strategy through its part
# contexts only, so none includes the strategy's own header.
PART_FILES = ["strategies/" + stem + ext for ext in (".h", ".cpp") for stem in (
    "strategy_collectives", "gradient_synchronization", "placement", "checkpoint_state", "communicator_collectives",
    "averaging_gradient_synchronization", "reducer_synchronization", "buffer_broadcast_placement",
    "ddp/ddp_checkpoint_state", "fsdp/fsdp_gradients", "fsdp/fsdp_placement", "fsdp/fsdp_checkpoint_state",
    "fsdp/fsdp_state")]
STRATEGY_HEADERS = ["strategies/strategy.h", "strategies/parallel_strategy.h", "strategies/ddp/ddp_strategy.h",
                    "strategies/fsdp/fsdp_strategy.h", "strategies/sharded/sharded_ddp_strategy.h"]
MAX_COLUMNS = 120
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def source_files(root):
    """The project's own .cpp/.h files, relative, '/'-separated: git's view (tracked and untracked
    but not ignored) where root is a work tree, else a walk that skips build trees and hidden ones."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = []
    if not any(out):
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [s for s in subfolders if not s.startswith((".", "build", "__pycache__"))]
            out += [os.path.relpath(os.path.join(folder, n), root).replace(os.sep, "/") for n in names]
    return sorted(f for f in set(out) if f.endswith((".cpp", ".h")) and os.path.isfile(os.path.join(root, f)))


def check(root):
    files = source_files(root)
    top_level = {f.split("/")[0] for f in files if "/" in f}
    lines, includes = {}, {}  # file -> its lines; file -> [(line, '"' or '<', the name included)]
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as source:
            lines[f] = source.read().split("\n")
        includes[f] = [(n, m.group(1), m.group(2)) for n, m in enumerate(map(INCLUDE.match, lines[f]), 1) if m]
    errors = []

    def fail(f, n, rule, found, sentence):
        errors.append(f'{f}:{n}: [{rule}] {found} -- {DOC} says: "{sentence}"')

    def project_header(f, name):  # the volt file an include names: from the root, else beside f
        for candidate in (name, os.path.normpath(os.path.join(os.path.dirname(f), name)).replace(os.sep, "/")):
            if candidate in lines:
                return candidate
        return None

    def c10d_chain(f, seen):  # the headers through which f includes c10d's, or None
        for _, _, name in includes[f]:
            header = project_header(f, name)
            if name.startswith(C10D_HEADERS):
                return [name]
            if header and header not in seen:
                seen.add(header)
                chain = c10d_chain(header, seen)
                if chain:
                    return [header] + chain
        return None

    for f in files:
        folder = f.split("/")[0]
        rule = LAYER_RULES.get(f) or LAYER_RULES.get(
            folder if folder != "callbacks" else "callbacks" + os.path.splitext(f)[1])
        c10d_allowed = folder == "distributed" or any(f.startswith(e) for e in C10D_EXCEPTIONS)
        for n, quote, name in includes[f]:
            first = name.split("/")[0]
            if rule and quote == '"' and first in top_level and first != folder:
                allowed, sentence = rule
                if first not in LIBRARY:
                    fail(f, n, "layers", f"{folder}/ includes {name}, which is above the library", DRAWN)
                elif not any(name == a or (a.endswith("/") and name.startswith(a)) for a in allowed):
                    fail(f, n, "layers", f"{folder}/ includes {name}", sentence)
            if (name.startswith("distributed/transports/") and folder != "distributed"
                    and not any(f.startswith(e) for e in TRANSPORTS_EXCEPTIONS)):
                fail(f, n, "transports", f"includes {name} from outside distributed/", TRANSPORTS)
            if c10d_allowed:
                continue
            # Reported where the line into distributed/ is crossed, not again in every includer.
            header = project_header(f, name)
            if name.startswith(C10D_HEADERS):
                fail(f, n, "c10d", f"includes {name}", C10D)
            elif header and header.startswith("distributed/") and c10d_chain(header, {header}):
                chain = " -> ".join([header] + c10d_chain(header, {header}))
                fail(f, n, "c10d", f"includes c10d's headers through {chain}", C10D)
        if f == "trainer/trainer.h":
            for n, _, name in includes[f]:
                if any(name == k or (k.endswith("/") and name.startswith(k)) for k in TRAINER_H_KEEPS_OUT):
                    fail(f, n, "lean trainer", f"trainer/trainer.h includes {name}", LEAN_TRAINER)
        if f in PART_FILES:
            for n, _, name in includes[f]:
                if name in STRATEGY_HEADERS:
                    fail(f, n, "parts", f"a part includes {name}", PARTS)
        if folder != "tests":
            for n, text in enumerate(lines[f], 1):
                if len(text.rstrip("\r")) > MAX_COLUMNS:
                    fail(f, n, "columns", f"{len(text.rstrip(chr(13)))} columns (limit {MAX_COLUMNS})", COLUMNS)
    if "trainer/trainer.h" in lines:
        # Comments and string literals blanked first, so that prose saying "friend" is no declaration.
        text = "\n".join(lines["trainer/trainer.h"])
        code = re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"',
                      lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
        for m in re.finditer(r"\bfriend\b", code):
            fail("trainer/trainer.h", code.count("\n", 0, m.start()) + 1, "no friend", "declares a friend", NO_FRIEND)
    return errors, len(files)


def check_doc_sentences(root):
    """Every quoted sentence must still be in the doc (box-drawing characters and line breaks aside)."""
    with open(os.path.join(root, DOC), encoding="utf-8") as f:
        doc = " ".join(re.sub(r"[│├└◄►─▼]", " ", f.read()).split())
    sentences = [PARTS, LEAN_TRAINER, FABRIC, RUN, UMBRELLA, DRAWN, CORE, GROUND, PRECISION, DISTRIBUTED, STRATEGIES, CALLBACKS, TRAINER,
                 TRANSPORTS, C10D, COLUMNS, NO_FRIEND]
    return [f'{DOC}: no longer says "{s}": revisit the rule in {os.path.basename(__file__)} that quotes it'
            for s in sentences if " ".join(s.split()) not in doc]


# The self-test's tree: file -> its lines. "// planted: RULE, ..." marks a line that must be
# reported under exactly those rules; no other line may be: allowed look-alikes sit beside them.
SELF_TEST_TREE = {
    "core/error.h": ['#include "core/other.h"', '#include "data/batch.h"  // planted: layers'],
    "data/batch.h": ['#include "core/error.h"', "#include <torch/torch.h>"],
    "data/loader.h": ['#include "strategies/strategy.h"  // planted: layers'],
    "checkpoint/state_dict_bytes.h": ['#include "core/error.h"'],
    "loggers/csv.cpp": ['#include "loggers/csv.h"', '#include "trainer/trainer.h"  // planted: layers'],
    "precision/precision.h": ['#include "data/batch.h"', '#include "data/loader.h"  // planted: layers'],
    "distributed/c10d_compat.h": ["#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>"],
    "distributed/transports/ring.h": ['#include "distributed/c10d_compat.h"'],
    "distributed/communicator.h": ['#include "checkpoint/state_dict_bytes.h"'],
    "distributed/communicator.cpp": ['#include "distributed/transports/ring.h"'],
    "distributed/process_group.h": ['#include "distributed/c10d_compat.h"'],
    "strategies/placement.cpp": ['#include "strategies/part_context.h"',
                                 '#include "strategies/strategy.h"  // planted: parts'],
    "strategies/ddp_placement.cpp": ['#include "strategies/strategy.h"'],
    "strategies/fsdp/fsdp_placement.cpp": ['#include "strategies/fsdp/fsdp_state.h"',
                                           '#include "strategies/fsdp/fsdp_strategy.h"  // planted: parts'],
    "strategies/fsdp/fsdp_units.cpp": ['#include "strategies/fsdp/fsdp_strategy.h"'],
    "strategies/strategy.h": ['#include "distributed/communicator.h"', '#include "data/loader.h"',
                              '#include "callbacks/callback.h"  // planted: layers'],
    "callbacks/callback.h": ['#include "data/batch.h"', '#include "trainer/trainer.h"  // planted: layers'],
    "callbacks/timer.cpp": ['#include "trainer/trainer.h"', '#include "trainer/loop_state.h"  // planted: layers'],
    "trainer/trainer.h": ['#include "callbacks/callback.h"',
                          '#include "distributed/process_launcher.h"  // planted: lean trainer',
                          '#include "strategies/strategy.h"  // planted: lean trainer',
                          '#include "distributed/communicator.h"  // planted: layers, lean trainer',
                          '#include "distributed/process_group.h"  // planted: layers, c10d, lean trainer',
                          '#include "bench/bench_support.h"  // planted: layers', "// The Trainer has no friend:",
                          'const char* why = "a friend is";', "class Trainer {",
                          "  friend class Fit;  // planted: no friend", "};"],
    "fabric/fabric.cpp": ['#include "run/run_setup.h"', '#include "strategies/strategy.h"',
                          '#include "trainer/trainer.h"  // planted: layers'],
    "run/run_setup.cpp": ['#include "strategies/strategy.h"', '#include "fabric/fabric.h"  // planted: layers'],
    "trainer/volt.h": ['#include "fabric/fabric.h"', '#include "run/run_setup.h"'],
    "trainer/loop.cpp": ['#include "run/run_setup.h"', '#include "fabric/fabric.h"  // planted: layers'],
    "bench/communicator_overhead.cpp": ['#include "distributed/c10d_compat.h"'],
    "bench/shm.cpp": ['#include "distributed/transports/ring.h"  // planted: transports, c10d',
                      "x" * MAX_COLUMNS + "  // planted: columns", "y" * MAX_COLUMNS],
    "tests/distributed/ring_test.cpp": ['#include "distributed/transports/ring.h"', "x" * (MAX_COLUMNS + 1)],
    "tests/trainer/ring_test.cpp": ['#include "distributed/transports/ring.h"  // planted: transports, c10d'],
    "bench/shm_all_reduce.cpp": ['#include "distributed/transports/ring.h"  // planted: c10d'],
    "examples/starter.cpp": ['#include "distributed/process_group.h"  // planted: c10d'],
    "cli/volt_ckpt.cpp": ["#include <torch/csrc/distributed/c10d/Store.hpp>  // planted: c10d"],
}


def self_test():
    """(problems, how many violations were planted): a rule that misses its planted line, or that
    reports an allowed one, is a problem."""
    expected = set()
    for relative, file_lines in SELF_TEST_TREE.items():
        for n, text in enumerate(file_lines, 1):
            if "// planted: " in text:
                expected |= {(f"{relative}:{n}", r.strip()) for r in text.split("// planted: ")[1].split(",")}
    with tempfile.TemporaryDirectory() as root:
        for relative, file_lines in SELF_TEST_TREE.items():
            os.makedirs(os.path.dirname(os.path.join(root, relative)), exist_ok=True)
            with open(os.path.join(root, relative), "w", encoding="utf-8") as f:
                f.write("\n".join(file_lines) + "\n")
        errors, _ = check(root)
    found = {re.match(r"(\S+:\d+): \[([^\]]+)\]", e).groups(): e for e in errors}
    problems = [f"self-test: not reported: {where} [{rule}]" for where, rule in sorted(expected - set(found))]
    problems += [f"self-test: reported though allowed: {e}" for key, e in found.items() if key not in expected]
    return problems, len(expected)


def main(argv):
    problems, planted = self_test()
    if problems:
        print("\n".join(problems))
        print(f"architecture_rules_test: self-test failed ({len(problems)} problem(s)): the rules cannot be trusted")
        return 1
    print(f"architecture_rules_test: self-test passed ({planted} planted violations reported, nothing else)")
    if "--self-test" in argv:
        return 0
    positional = [a for a in argv[1:] if not a.startswith("--")]
    root = os.path.abspath(positional[0] if positional else os.path.join(os.path.dirname(__file__), "..", ".."))
    errors, checked = check(root)
    errors = check_doc_sentences(root) + errors
    if errors:
        print("\n".join(errors))
        print(f"architecture_rules_test: {len(errors)} violation(s) in {checked} C++ file(s)")
        return 1
    print(f"architecture_rules_test: {checked} C++ file(s) keep the rules of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
