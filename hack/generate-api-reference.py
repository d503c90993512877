#!/usr/bin/python3
"""Writes docs/api.md, the TrainingJob API reference, from the CRD's OpenAPI schema.

The descriptions live in one place, manifests/crd/trainingjob.yaml: `kubectl explain` prints
them from the API server, and this script renders the same text as Markdown, one section per
object of the schema (as TFJob's and JobSet's API references are laid out).

  hack/generate-api-reference.py           write docs/api.md
  hack/generate-api-reference.py --check   fail, with a diff, when docs/api.md is not what the
                                           CRD renders (a ctest runs this)
"""
import difflib
import os
import re
import sys

import yaml

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRD = os.path.join(REPO_ROOT, "manifests", "crd", "trainingjob.yaml")
OUT = os.path.join(REPO_ROOT, "docs", "api.md")

# metadata is Kubernetes' ObjectMeta: the API server publishes (and kubectl explain prints) its
# own descriptions, so the CRD may only constrain name there.
METADATA = ("Standard object metadata (`kubectl explain trainingjob.metadata`). The name becomes "
            "the headless Service's and prefixes the pods' hostnames: a DNS-1035 label, short "
            "enough that `<name>-<type>-<index>` fits in 63 characters.")


def fail(msg):
    sys.exit("generate-api-reference: " + msg)


def one_line(text):
    return re.sub(r"\s+", " ", str(text)).strip().replace("|", "\\|")


def anchor(path):
    # GitHub's heading anchors: lowercase, punctuation other than '-' and '_' dropped.
    return re.sub(r"[^a-z0-9_\- ]", "", path.lower()).replace(" ", "-")


def type_of(schema, path):
    """The Type column: the type, its format, its constraints, a link to a nested object."""
    t = schema.get("type", "any")
    if t == "array":
        inner = type_of(schema.get("items", {}), path + "[]")
        text = "[]" + inner
    elif t == "object" and "properties" in schema:
        text = "[object](#%s)" % anchor(path)
    elif t == "object" and isinstance(schema.get("additionalProperties"), dict):
        inner = schema["additionalProperties"]
        value = ("[object](#%s)" % anchor(path + ".<type>") if "properties" in inner
                 else inner.get("type", "any"))
        text = "map[string]" + value
    elif t == "object" and schema.get("x-kubernetes-preserve-unknown-fields"):
        text = "object (any fields)"
    else:
        text = t
    if "format" in schema:
        text += " (%s)" % schema["format"]
    notes = []
    if "enum" in schema:
        notes.append(" \\| ".join("`%s`" % v for v in schema["enum"]))
    if "minimum" in schema and "maximum" in schema:
        notes.append("%s to %s" % (schema["minimum"], schema["maximum"]))
    elif "minimum" in schema:
        notes.append("at least %s" % schema["minimum"])
    elif "maximum" in schema:
        notes.append("at most %s" % schema["maximum"])
    if "maxLength" in schema:
        notes.append("at most %s characters" % schema["maxLength"])
    if "default" in schema:
        notes.append("default `%s`" % schema["default"])
    return text + ("; " + "; ".join(notes) if notes else "")


def sections(schema, path, title, out):
    """Appends (path, title, description, rows) for `schema` and every object below it."""
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    rows, nested = [], []
    for name, sub in props.items():
        sub_path = name if not path else path + "." + name
        if name == "metadata" and not path:
            desc = METADATA
        elif "description" not in sub:
            fail("%s has no description in %s" % (sub_path, os.path.relpath(CRD, REPO_ROOT)))
        else:
            desc = sub["description"]
        field = "`%s`" % name + (" (required)" if name in required else "")
        if name == "metadata" and not path:
            rows.append((field, "object (ObjectMeta)", one_line(desc)))
            continue
        rows.append((field, type_of(sub, sub_path), one_line(desc)))
        if sub.get("type") == "object" and "properties" in sub:
            nested.append((sub, sub_path))
        elif sub.get("type") == "array" and "properties" in sub.get("items", {}):
            nested.append((sub["items"], sub_path + "[]"))
        elif isinstance(sub.get("additionalProperties"), dict) and \
                "properties" in sub["additionalProperties"]:
            nested.append((sub["additionalProperties"], sub_path + ".<type>"))
    # The validation rules (x-kubernetes-validations) of this object and of its scalar fields:
    # what the API server refuses, in the rules' own words.
    refusals = [one_line(r["message"]) for r in schema.get("x-kubernetes-validations", [])]
    for name, sub in props.items():
        if sub.get("type") != "object":
            refusals += [one_line(r["message"]) for r in sub.get("x-kubernetes-validations", [])]
    for r in schema.get("x-kubernetes-validations", []) + [
            r for sub in props.values() for r in sub.get("x-kubernetes-validations", [])]:
        if "message" not in r:
            fail("a validation rule of %s has no message (the reference quotes it): %s"
                 % (path or "the root", r.get("rule")))
    out.append((path, title, one_line(schema.get("description", "")), rows, refusals))
    for sub, sub_path in nested:
        sections(sub, sub_path, sub_path, out)


def render(crd):
    spec = crd["spec"]
    names = spec["names"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    lines = [
        "# TrainingJob API reference",
        "",
        "<!-- Generated by hack/generate-api-reference.py from manifests/crd/trainingjob.yaml."
        " Do not edit: change the descriptions in the CRD and run the script again. -->",
        "",
        "Group `%s`, version `%s`, kind `%s` (%s), short name %s, category %s. The same text, "
        "field by field, is what `kubectl explain` prints, for example "
        "`kubectl explain trainingjob.spec.replicaSpecs.Worker.replicas`."
        % (spec["group"], version["name"], names["kind"], spec["scope"].lower(),
           ", ".join("`%s`" % n for n in names.get("shortNames", [])),
           ", ".join("`%s`" % c for c in names.get("categories", [])) or "none"),
        "",
        "Status is written through the `/status` subresource by the operator. Conditions follow "
        "Kubernetes' API conventions (a list keyed by `type`; `lastTransitionTime` changes only "
        "when `status` does; `observedGeneration` is the spec generation they were computed "
        "from), so `kubectl wait --for=condition=Succeeded tj/<name>` waits for a job to "
        "succeed.",
        "",
        "## Columns of `kubectl get trainingjobs`",
        "",
        "| Column | Shown by | Value | Description |",
        "|---|---|---|---|",
    ]
    for c in version.get("additionalPrinterColumns", []):
        shown = "`-o wide`" if c.get("priority", 0) > 0 else "default"
        lines.append("| %s | %s | `%s` | %s |" % (c["name"], shown, c["jsonPath"],
                                                 one_line(c.get("description", ""))))
    out = []
    sections(schema, "", names["kind"], out)
    for path, title, desc, rows, refusals in out:
        lines += ["", "## %s" % title, ""]
        if desc:
            lines += [desc, ""]
        lines += ["| Field | Type | Description |", "|---|---|---|"]
        lines += ["| %s | %s | %s |" % r for r in rows]
        if refusals:
            lines += ["", "The API server refuses (the CRD's validation rules, Kubernetes 1.29 "
                      "or newer):", ""]
            lines += ["- %s" % m for m in dict.fromkeys(refusals)]
    return "\n".join(lines) + "\n"


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        fail("usage: hack/generate-api-reference.py [--check]")
    with open(CRD) as f:
        text = render(yaml.safe_load(f))
    rel = os.path.relpath(OUT, REPO_ROOT)
    if not check:
        with open(OUT, "w") as f:
            f.write(text)
        print("generate-api-reference: wrote %s" % rel, file=sys.stderr)
        return
    current = open(OUT).read() if os.path.exists(OUT) else ""
    if current != text:
        sys.stderr.writelines(difflib.unified_diff(current.splitlines(True),
                                                   text.splitlines(True), rel, "generated"))
        fail("%s differs from the CRD's descriptions: run hack/generate-api-reference.py" % rel)


if __name__ == "__main__":
    main()
