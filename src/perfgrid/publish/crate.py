"""The archive's RO-Crate: ``ro-crate-metadata.json``, what a paper's reader's tools can read.

Written with the ``rocrate`` library after the Workflow Run Crate profile 0.5
(https://w3id.org/ro/wfrun/workflow/0.5): the Snakefile is the main entity (a
``ComputationalWorkflow``, its rules as parts, the software that ran as its
``softwareRequirements``), one ``CreateAction`` is the run (the workflow as its
instrument, the config as used and the host label as its object, raw results, tables,
plots and reports as its result; machine.json, run.json, plan.json and the logs are
about it), and the licence and authors come from CITATION.cff.

Every archived file is a ``File`` with its ``contentSize`` and ``sha256``, except the
crate itself and ``MANIFEST.sha256``: the manifest hashes the crate (written just before
it), so the crate cannot hash the manifest. ``perfgrid verify`` checks both: the manifest
against the bytes, the crate against the files (:func:`problems`).

Versions are the result set's own records (machine.json, run.json, the tables' columns),
never this machine's: an archive made elsewhere describes the machine that ran.
"""

from __future__ import annotations

import csv
import json
import mimetypes
import time
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote

import yaml

from perfgrid.kit.paths import Layout

NAME = "ro-crate-metadata.json"
#: the profiles the crate follows (the root dataset's conformsTo)
PROCESS_RUN = "https://w3id.org/ro/wfrun/process/0.5"
WORKFLOW_RUN = "https://w3id.org/ro/wfrun/workflow/0.5"
WORKFLOW_RO_CRATE = "https://w3id.org/workflowhub/workflow-ro-crate/1.0"
#: the profile's terms (``sha256`` among them), after the RO-Crate 1.1 context
RUN_CONTEXT = "https://w3id.org/ro/terms/workflow-run/context"
#: machine.json's ``tools`` (and the tables' older columns) that every experiment may run:
#: name -> what it is, what it does, home page; then those experiments declare (:func:`known_tools`)
SHARED_TOOLS = {
    "cc": ("C compiler (cc)", "builds the native programs", "https://gcc.gnu.org/"),
    "erl": ("Erlang/OTP", "the erlang rows", "https://www.erlang.org/"),
    "perf": ("perf", "the kernel counters (perf stat)", "https://perf.wiki.kernel.org/"),
}
#: the table columns that recorded a shared tool's version before machine.json did
SHARED_TABLE_VERSIONS = {"otp": "erl"}


def known_tools() -> dict[str, tuple[str, str, str]]:
    """Every tool the crate may name: :data:`SHARED_TOOLS`, then the experiments'."""
    from perfgrid import experiments

    return {**SHARED_TOOLS, **{key: (tool.title, tool.role, tool.url)
                               for key, tool in experiments.tools().items()}}


def table_versions() -> dict[str, str]:
    """The table columns that recorded a tool's version before machine.json did -> the
    tool: :data:`SHARED_TABLE_VERSIONS`, then the experiments' (``Tool.table_column``)."""
    from perfgrid import experiments

    return {**SHARED_TABLE_VERSIONS, **{tool.table_column: key
                                        for key, tool in experiments.tools().items()
                                        if tool.table_column}}

FileFacts = Mapping[str, tuple[str, int]]


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def table_facts(tables: list[Path]) -> tuple[dict[str, set[str]], list[float]]:
    """Tool versions the tables recorded (OTP, ab) and every row's started/finished time."""
    versions: dict[str, set[str]] = {}
    times: list[float] = []
    columns = table_versions()
    for table in tables:
        with open(table, newline="") as handle:
            for row in csv.DictReader(handle):
                for column, tool in columns.items():
                    if row.get(column):
                        versions.setdefault(tool, set()).add(row[column])
                for column in ("started", "finished"):
                    try:
                        times.append(float(row.get(column) or "nan"))
                    except ValueError:
                        continue
    return versions, [t for t in times if t == t]


def software(machine: dict[str, Any], run: dict[str, Any],
             recorded: dict[str, set[str]]) -> list[dict[str, Any]]:
    """The software that ran, as SoftwareApplication properties (``@id`` included).

    Python, the kernel and the Python packages from machine.json; Snakemake from run.json
    where machine.json has none; the native tools from machine.json's ``tools`` (a tool
    not on PATH there is left out) or, for older result sets, the tables' columns. A
    version no record holds is not looked up here: the entity says "not recorded".
    """
    implementation = machine.get("python_implementation", "CPython")
    out = [{"@id": "#software-python", "name": f"Python ({implementation})",
            "url": "https://www.python.org/", "softwareVersion": machine.get("python")},
           {"@id": "#software-linux", "name": "Linux kernel", "url": "https://kernel.org/",
            "softwareVersion": machine.get("kernel")}]
    packages = dict(machine.get("packages") or {})
    if not packages.get("snakemake") and run.get("snakemake"):
        packages["snakemake"] = run["snakemake"]
    for name, version in sorted(packages.items()):
        if name == "perfgrid":  # this workflow's own package: not on PyPI
            out.append({"@id": "#software-perfgrid", "name": name,
                        "description": "the workflow's Python package (src/perfgrid)",
                        "softwareVersion": version})
        elif version:
            out.append({"@id": f"https://pypi.org/project/{name}/{version}/", "name": name,
                        "url": f"https://pypi.org/project/{name}/",
                        "softwareVersion": version})
    tools = machine.get("tools")
    for key, (name, role, url) in known_tools().items():
        if isinstance(tools, dict) and key in tools:
            version = tools[key]
            if version is None:  # not on PATH on the machine that ran
                continue
        elif key in recorded:
            version = ", ".join(sorted(recorded[key]))
        else:
            version = None
        out.append({"@id": f"#software-{key}", "name": name, "description": role, "url": url,
                    "softwareVersion": version})
    for entity in out:
        if not entity["softwareVersion"]:
            entity["softwareVersion"] = "not recorded"
    return out


def citation(path: Path) -> dict[str, Any]:
    """CITATION.cff as a mapping (empty where absent or unreadable)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _author(crate: Any, number: int, author: dict[str, Any]) -> Any:
    """A CFF author as a Person (given/family names) or an Organization (a name)."""
    from rocrate.model.contextentity import ContextEntity

    orcid = author.get("orcid")
    if author.get("family-names") or author.get("given-names"):
        name = " ".join(str(author[k]) for k in ("given-names", "family-names") if k in author)
        kind = "Person"
    else:
        name, kind = str(author.get("name", "unknown")), "Organization"
    identifier = str(orcid) if orcid else f"#author-{number}"
    props: dict[str, Any] = {"@type": kind, "name": name}
    for key in ("email", "affiliation"):
        if author.get(key):
            props[key] = str(author[key])
    return crate.add(ContextEntity(crate, identifier, properties=props))


def _file_props(name: str, sha256: str, size: int) -> dict[str, Any]:
    props = {"contentSize": str(size), "sha256": sha256}
    kind, _ = mimetypes.guess_type(name)
    if kind:
        props["encodingFormat"] = kind
    return props


def build(files: FileFacts, result_root: Path, host: str, repo: Path,
          created: float | None = None) -> bytes:
    """``ro-crate-metadata.json`` for an archive of ``files`` (name -> (sha256, size)).

    ``files`` are the archive's members relative to its top folder, every one but the
    crate and the manifest; ``result_root`` is ``results/<host>`` on disk (its records
    give the run's times and software), ``repo`` holds CITATION.cff.
    """
    from rocrate.model.contextentity import ContextEntity
    from rocrate.rocrate import ROCrate

    prefix = f"results/{host}/"
    machine = _read_json(result_root / "machine.json")
    run = _read_json(result_root / "run.json")
    recorded, times = table_facts(Layout(result_root).tables())
    cff = citation(repo / "CITATION.cff")

    crate = ROCrate(version="1.1")
    crate.metadata.extra_contexts.append(RUN_CONTEXT)
    title = str(cff.get("title") or "perfgrid")
    crate.name = f"{title}: results of host {host}"
    crate.description = (f"perfgrid's workflow, the raw results of one run on host {host} "
                         f"and the tables, plots and report made from them.")
    crate.datePublished = _iso(created if created is not None else time.time())
    authors = [_author(crate, i, a) for i, a in enumerate(cff.get("authors") or [], 1)
               if isinstance(a, dict)]
    named = cff.get("license") or []  # an SPDX id, or a list of them
    licence = [crate.add(ContextEntity(crate, f"https://spdx.org/licenses/{spdx}",
                                       properties={"@type": "CreativeWork", "name": str(spdx),
                                                   "identifier": str(spdx)}))
               for spdx in (named if isinstance(named, list) else [named])] or None
    if licence is not None:
        licence = licence[0] if len(licence) == 1 else licence
        crate.license = licence
    if authors:
        crate.root_dataset["author"] = authors

    if "Snakefile" not in files:
        raise ValueError("Snakefile not archived: an archive's crate needs its workflow")
    snakemake = (machine.get("packages") or {}).get("snakemake") or run.get("snakemake")
    workflow = crate.add_workflow(
        None, "Snakefile", main=True, lang="snakemake", lang_version=snakemake,
        properties={"name": f"{title} (Snakemake workflow)",
                    **_file_props("Snakefile", *files["Snakefile"])})
    if cff.get("version"):
        workflow["version"] = str(cff["version"])
    if authors:
        workflow["author"] = authors
    if licence is not None:
        workflow["license"] = licence
    entities: dict[str, Any] = {"Snakefile": workflow}
    for name, (digest, size) in sorted(files.items()):
        if name != "Snakefile":
            entities[name] = crate.add_file(None, name, properties=_file_props(name, digest,
                                                                                size))
    workflow["hasPart"] = [e for n, e in entities.items()
                           if n.startswith("workflow/") and n.endswith(".smk")]
    apps = [crate.add(ContextEntity(crate, props.pop("@id"),
                                    properties={"@type": "SoftwareApplication", **props}))
            for props in software(machine, run, recorded)]
    workflow["softwareRequirements"] = apps

    def trace(name: str) -> bool:
        """A record of the run rather than its product: ``about`` the action."""
        return name in (f"{prefix}machine.json", f"{prefix}run.json",
                        f"{prefix}plan.json") or name.startswith(
            f"{prefix}logs/")

    config_used = f"{prefix}config.used.yaml"
    inputs = [entities[config_used]] if config_used in entities else []
    label = crate.add(ContextEntity(crate, "#host", properties={
        "@type": "PropertyValue", "name": "host", "value": host,
        "description": "the config's host: the label of this result set (results/<host>/)"}))
    results = [e for n, e in entities.items()
               if n.startswith(prefix) and n != config_used and not trace(n)]
    mtimes = [(result_root / n.removeprefix(prefix)).stat().st_mtime for n in entities
              if n.startswith(prefix) and (result_root / n.removeprefix(prefix)).is_file()]
    start_candidates = [*times, *([float(run["started"])] if isinstance(
        run.get("started"), int | float) else [])]
    end = max(mtimes, default=None)
    start = min(start_candidates, default=None)
    props: dict[str, Any] = {
        "name": f"perfgrid run on host {host}",
        "description": (f"the Snakemake workflow run on host {host}: "
                        f"{machine.get('cpu_model', 'an unrecorded CPU')}, "
                        f"{machine.get('cpus_logical', '?')} logical CPUs, Linux "
                        f"{machine.get('kernel', '?')} (machine.json)"),
        "actionStatus": {"@id": "http://schema.org/CompletedActionStatus"},
    }
    if end is not None:
        props["endTime"] = _iso(end)
    if start is not None and (end is None or start <= end):
        props["startTime"] = _iso(start)
    key = f"perfgrid:{host}:{props.get('startTime', '')}:{props.get('endTime', '')}"
    action = crate.add_action(workflow, identifier=f"#run-{uuid.uuid5(uuid.NAMESPACE_URL, key)}",
                              object=[*inputs, label], result=results, properties=props)
    for name, entity in entities.items():
        if trace(name):
            entity["about"] = action
    crate.root_dataset["mentions"] = [action]
    profiles = [crate.add(ContextEntity(crate, uri, properties={
        "@type": "CreativeWork", "name": name, "version": uri.rsplit("/", 1)[1]}))
        for uri, name in ((PROCESS_RUN, "Process Run Crate"),
                          (WORKFLOW_RUN, "Workflow Run Crate"),
                          (WORKFLOW_RO_CRATE, "Workflow RO-Crate"))]
    crate.root_dataset["conformsTo"] = profiles
    return (json.dumps(crate.metadata.generate(), indent=2) + "\n").encode()


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def problems(data: bytes, files: FileFacts, changed: Collection[str] = ()) -> list[str]:
    """Where the crate disagrees with the archived ``files`` (name -> (sha256, size)).

    ``files`` holds every archived file but the crate and the manifest. Each must be a
    ``File`` of the crate with its very size and SHA-256, and each of the crate's files must
    be archived. Files in ``changed`` (already found altered against the manifest) are
    not reported twice.
    """
    try:
        graph = json.loads(data)["@graph"]
    except (ValueError, RecursionError, KeyError, TypeError) as err:
        return [f"{NAME}: not RO-Crate JSON-LD ({type(err).__name__}: {str(err)[:80]})"]
    if not isinstance(graph, list):
        return [f"{NAME}: @graph is not a list"]
    out: list[str] = []
    listed: set[str] = set()
    for entity in graph:
        if not isinstance(entity, dict) or "File" not in _as_list(entity.get("@type")):
            continue
        ident = entity.get("@id")
        if not isinstance(ident, str) or ident == NAME:
            continue
        name = unquote(ident)
        path = PurePosixPath(name)
        if ":" in name.split("/", 1)[0] or name.startswith("#") or path.is_absolute() \
                or ".." in path.parts:
            out.append(f"{NAME} lists a file outside the archive: {ident}")
            continue
        if name in listed:
            out.append(f"{NAME} lists twice: {name}")
            continue
        listed.add(name)
        if name not in files:
            out.append(f"in {NAME}, not in the archive: {name}")
            continue
        if name in changed:
            continue
        digest, size = files[name]
        if entity.get("sha256") != digest:
            out.append(f"{NAME} sha256 disagrees with the file: {name}")
        if str(entity.get("contentSize")) != str(size):
            out.append(f"{NAME} contentSize {entity.get('contentSize')!r} disagrees with the "
                       f"file ({size} bytes): {name}")
    out += [f"in the archive, not in {NAME}: {name}" for name in sorted(set(files) - listed)]
    return out
