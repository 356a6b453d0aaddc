#!/usr/bin/env python3
"""Collect the llm-d router's sample EndpointPickerConfigs, and its plugin registry, as test data.

Reads a checkout (or bare clone) of llm-d/llm-d-router at one commit and writes
``tests/upstream_configs/``: one YAML file per configuration and ``index.yaml``, the pinned list
the tests read (commit; per configuration its id, where it came from and its file; a configuration
found in several places is kept once, the others listed under ``also``; an illustration whose
plugins are not all of types upstream registers, such as a ``custom-scorer`` or ``....``, is not
a configuration upstream would load either, and is left out), plus
``registry.yaml``, every type ``cmd/epp/runner/runner.go`` registers with its stability and, for a
deprecated one, its replacement. Only the configurations are kept, as data: YAML comments and
surrounding prose are dropped (each file is re-serialised from the parsed mapping).

Where configurations come from (every one whose ``kind`` is ``EndpointPickerConfig``):

- YAML files anywhere but the Helm chart templates: a document that is one, or a string inside
  a document that is one (the perf values files embed them under ``pluginsCustomConfig``);
- Markdown (docs and plugin READMEs): fenced code blocks that are one;
- Go test files of the e2e suites (``test/e2e/``, ``test/coordinator/e2e/``) and the well-lit-path
  guides' configurations (``test/integration/epp/wellknown_configs_test.go``): backquoted strings
  that are one (the other integration tests' configurations exercise the loader, they are not
  samples);
- the Helm chart's ConfigMap (``config/charts/routerlib/templates/_config.yaml``), rendered here
  for each model-server setting it branches on (a template is not a configuration until rendered).

Usage::

    .venv/bin/python scripts/upstream_configs.py /work/.mirror/llm-d+llm-d-router/repo [--commit SHA]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "upstream_configs"
KIND = "EndpointPickerConfig"
_FENCE = re.compile(r"^```[a-zA-Z]*\n(.*?)^```", re.M | re.S)
_BACKQUOTED = re.compile(r"`([^`]*kind:\s*EndpointPickerConfig[^`]*)`", re.S)
_CHART = "config/charts/routerlib/templates/_config.yaml"
_E2E = ("test/e2e/", "test/coordinator/e2e/")
_WELL_KNOWN = "test/integration/epp/wellknown_configs_test.go"
_INTEGRATION_DATA = ("test/integration/", "test/testdata/")
_REGISTER = re.compile(r"fwkplugin\.(Register\w*)\((\w+)\.(\w+),\s*fwkplugin\.Stability(\w+)(.*)")


class Repo:
    def __init__(self, path: Path, commit: str) -> None:
        self.path, self.commit = path, commit
        self._read: dict[str, str] = {}

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True).stdout

    def files(self) -> list[str]:
        return self.git("ls-tree", "-r", "--name-only", self.commit).split()

    def read(self, path: str) -> str:
        if path not in self._read:
            self._read[path] = self.git("show", f"{self.commit}:{path}")
        return self._read[path]


def _is_config(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _from_yaml_text(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where inside, config) for each configuration a YAML text holds or embeds."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return
    for i, doc in enumerate(docs):
        yield from _walk(doc, f"doc{i}" if len(docs) > 1 else "")


def _walk(node: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if _is_config(node):
        yield where, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{where}.{key}".lstrip("."))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{where}[{i}]")
    elif isinstance(node, str) and KIND in node:
        try:
            inner = yaml.safe_load(node)
        except yaml.YAMLError:
            return
        if _is_config(inner):
            yield where, inner


_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


def _chart_variants(template: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The chart's ConfigMap as rendered for each model-server setting its template branches on."""
    variants = {  # label: (model server type, protocol, latency predictor)
        "vllm-http": ("vllm", "http", False),
        "vllm-grpc": ("vllm", "grpc", False),
        "triton": ("triton", "http", False),
        "sglang": ("sglang", "http", False),
        "latency-predictor": ("vllm", "http", True),
    }
    for label, (engine, protocol, predictor) in variants.items():
        parsers = ["vllmgrpc-parser"] if (engine, protocol) == ("vllm", "grpc") else []
        parsers += ["passthrough-parser"] if engine == "triton" else []
        conditions = {
            'and (eq (lower $modelServerType) "vllm") (eq (lower $modelServerProtocol) "grpc")': bool(parsers)
            and engine == "vllm",
            ".Values.router.epp.parsers": False,
            'eq (lower $modelServerType) "triton"': engine == "triton",
            'ne $modelServerType "vllm"': engine != "vllm",
            ".Values.router.latencyPredictor.enabled": predictor,
            "$parsers": bool(parsers),
            ".Values.router.epp.pluginsCustomConfig": False,
        }
        values = {"$modelServerType | quote": f'"{engine}"', "$p": ""}
        first = template.split("\n---", 1)[0]  # the ConfigMap of the picker's configurations
        rendered = _render(first.splitlines(), conditions, values, parsers)
        configmap = next(yaml.safe_load_all(rendered))
        for key, text in configmap["data"].items():
            config = yaml.safe_load(text)
            if _is_config(config):
                yield f"{label}.{key}", config


def _render(lines: list[str], conditions: dict[str, bool], values: dict[str, str], parsers: list[str]) -> str:
    """The few Go-template constructs of the chart's ConfigMap, evaluated for one setting.

    ``if``/``else if``/``else``/``end`` by the ``conditions`` given for this template's tests;
    ``range $p := $parsers`` over ``parsers``; ``{{ expr }}`` by ``values`` (a default's first
    argument for ``x | default "v" | quote``-style expressions); other actions (``define``,
    ``include``, assignments) print nothing. Anything else unknown raises, so a changed template
    is noticed rather than rendered wrong.
    """
    out: list[str] = []
    stack: list[list[bool]] = []  # per open block: [active now, some branch taken]
    ranging: list[str] | None = None
    for line in lines:
        actions = _ACTION.findall(line)
        text = _ACTION.sub("", line)
        head = actions[0].split()[0] if actions else ""
        if ranging is not None:
            if head == "end":
                for parser in parsers:
                    out.extend(r.replace("\0", parser) for r in ranging)
                ranging = None
            else:
                ranging.append(_ACTION.sub("\0", line) if "$p" in line else line)
            continue
        active = all(b[0] for b in stack)
        if head == "if":
            cond = conditions[actions[0][3:].strip()] if active else False
            stack.append([cond, cond])
        elif head == "else":
            rest = actions[0][4:].strip()
            block = stack[-1]
            cond = not block[1] and (conditions[rest[3:].strip()] if rest.startswith("if ") else True)
            block[0], block[1] = cond, block[1] or cond
        elif head == "end":
            if stack:
                stack.pop()
        elif head == "range":
            if active:
                ranging = []
            else:
                stack.append([False, True])
        elif not active:
            continue
        elif actions and not text.strip():
            continue  # define, include, assignments: nothing printed
        else:
            for expr in actions:
                value = values.get(expr) or _default(expr)
                line = line.replace(f"{{{{ {expr} }}}}", value, 1)
            out.append(line)
    return "\n".join(out)


def _default(expr: str) -> str:
    """``.Values.x | default "v" | quote`` → its default, as the chart's default values leave it."""
    m = re.search(r'\|\s*default\s+("[^"]*"|\S+)', expr)
    if m is None:
        if "include" in expr or ".Release" in expr:
            return "chart"
        raise ValueError(f"unknown template expression {expr!r}")
    value = m.group(1)
    return value if value.startswith('"') or "quote" not in expr else f'"{value}"'


def collect(repo: Repo) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(source path, where inside it, configuration) for every sample configuration."""
    for path in repo.files():
        if path == _CHART:
            for label, config in _chart_variants(repo.read(path)):
                yield path, label, config
        elif path.startswith("config/charts/") and "/templates/" in path:
            continue
        elif path.endswith((".yaml", ".yml")) and not path.startswith(_INTEGRATION_DATA):
            for where, config in _from_yaml_text(repo.read(path)):
                yield path, where, config
        elif path.endswith(".md"):
            for i, block in enumerate(_FENCE.findall(repo.read(path))):
                if KIND in block:
                    for where, config in _from_yaml_text(block):
                        yield path, f"block{i}{('.' + where) if where else ''}", config
        elif path.endswith("_test.go") and (path.startswith(_E2E) or path == _WELL_KNOWN):
            for i, text in enumerate(_BACKQUOTED.findall(repo.read(path))):
                for where, config in _from_yaml_text(text):
                    yield path, f"string{i}{('.' + where) if where else ''}", config


def _registry(repo: Repo) -> list[dict[str, str]]:
    """Every registered type: its name, stability and (deprecated) replacement, from runner.go."""
    runner = repo.read("cmd/epp/runner/runner.go")
    imports = {
        m.group(1) or m.group(2).rsplit("/", 1)[-1]: m.group(2)
        for m in re.finditer(r'^\s*(\w+)?\s*"github\.com/llm-d/llm-d-router/([^"]+)"', runner, re.M)
    }
    files = [f for f in repo.files() if f.endswith(".go") and not f.endswith("_test.go")]
    body = runner[runner.index("func (r *Runner) registerInTreePlugins()") :]
    body = body[: body.index("\n}\n")]
    found: dict[str, dict[str, str]] = {}
    for fn, package, const, stability, rest in _REGISTER.findall(body):
        name = _constant(repo, files, imports[package], const)
        entry = {"type": name, "stability": stability}
        if "Deprecated" in fn:
            replacement = re.findall(r"(\w+)\.(\w+)\)", rest)
            if replacement:
                pkg, c = replacement[-1]
                entry["replacement"] = _constant(repo, files, imports[pkg], c)
        found.setdefault(name, entry)
    return sorted(found.values(), key=lambda e: e["type"])


def _constant(repo: Repo, files: list[str], package: str, const: str) -> str:
    """The string a Go constant of ``package`` (or of a package below it) is defined as."""
    sources = [repo.read(f) for f in files if f.startswith(package + "/")]
    literal = re.compile(rf"\b{const}\s*(?:\w+\s*)?=\s*\"([^\"]+)\"")
    for text in sources:
        m = literal.search(text)
        if m is not None:
            return m.group(1)
    alias = re.compile(rf"\b{const}\s*=\s*(\w+)\.(\w+)")  # the value of a constants package's constant
    for text in sources:
        m = alias.search(text)
        if m is not None:
            imported = re.search(rf'\b{m.group(1)}\s+"github\.com/llm-d/llm-d-router/([^"]+)"', text)
            if imported is not None:
                return _constant(repo, files, imported.group(1), m.group(2))
    raise LookupError(f"{const} not found under {package}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("repo", type=Path, help="a clone of llm-d/llm-d-router (bare is fine)")
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args()
    repo = Repo(args.repo, args.commit)
    commit = repo.git("rev-parse", args.commit).strip()
    repo.commit = commit
    for old in OUT.glob("*.yaml"):
        old.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    types = _registry(repo)
    registry = {"repository": "llm-d/llm-d-router", "commit": commit, "types": types}
    known = {t["type"] for t in types}
    entries: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {}
    for source, where, config in collect(repo):
        plugins = config.get("plugins") or []
        if not all(isinstance(p, dict) and p.get("type") in known for p in plugins):
            continue
        canonical = json.dumps(config, sort_keys=True)
        if canonical in seen:
            seen[canonical].setdefault("also", []).append(f"{source}#{where}" if where else source)
            continue
        n = len(entries)
        stem = re.sub(r"[^A-Za-z0-9]+", "-", f"{source}-{where}".lower()).strip("-")[-90:]
        file = f"{n:03d}-{stem}.yaml"
        (OUT / file).write_text(yaml.safe_dump(config, sort_keys=False))
        entry = seen[canonical] = {"id": n, "source": source, "where": where or None, "file": file}
        entries.append(entry)
    index = {"repository": "llm-d/llm-d-router", "commit": commit, "configs": entries}
    (OUT / "index.yaml").write_text(yaml.safe_dump(index, sort_keys=False))
    (OUT / "registry.yaml").write_text(yaml.safe_dump(registry, sort_keys=False))
    print(f"{len(entries)} configurations, {len(types)} registered types → {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
