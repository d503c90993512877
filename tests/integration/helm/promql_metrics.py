#!/usr/bin/python3
"""Every metric that the chart's dashboard and PrometheusRule query is one that tj-operator or
tj-trainer really exports.

Usage: promql_metrics.py DASHBOARD_JSON RENDERED_RULES_YAML SCRAPE_FILE...
The scrapes are /metrics answers of a running operator and trainer (Prometheus text format):
a name counts as exported when a "# TYPE" line declares it (histograms: also their _bucket,
_sum and _count series). `up` is Prometheus' own. Exit 1 naming each unknown metric and the
query it is in; also when a file yields no query (a check that checks nothing).
"""
import json
import re
import sys

import yaml

PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                "group_right", "bool", "offset", "inf", "nan"}
PROMETHEUS_OWN = {"up"}


def metric_names(expr):
    """The metric names of a PromQL expression (no full parser: enough for our queries)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    e = re.sub(r"\{[^}]*\}", "", e)                        # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                       # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\w+", "", e)                            # Grafana variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):
            continue                                       # a function or aggregation
        if word.lower() in PROMQL_WORDS:
            continue
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue                                       # 1e9, 0.5
        names.add(word)
    return names


def exported(scrapes):
    names = set(PROMETHEUS_OWN)
    for text in scrapes:
        for line in text.splitlines():
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if not m:
                continue
            names.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def queries(dashboard_path, rules_path):
    out = []
    dash = json.load(open(dashboard_path))
    for panel in dash.get("panels", []):
        for t in panel.get("targets", []):
            out.append(("dashboard panel %r" % panel.get("title"), t["expr"]))
    n_dash = len(out)
    for doc in yaml.safe_load_all(open(rules_path)):
        if not doc or doc.get("kind") != "PrometheusRule":
            continue
        for group in doc["spec"]["groups"]:
            for rule in group["rules"]:
                out.append(("rule %s" % rule.get("alert", rule.get("record")), rule["expr"]))
    return out, n_dash, len(out) - n_dash


def main():
    dashboard, rules, scrapes = sys.argv[1], sys.argv[2], sys.argv[3:]
    known = exported(open(p).read() for p in scrapes)
    qs, n_dash, n_rules = queries(dashboard, rules)
    if n_dash == 0 or n_rules == 0:
        print("FAIL no queries found (dashboard %d, rules %d)" % (n_dash, n_rules))
        return 1
    bad = 0
    used = set()
    for where, expr in qs:
        names = metric_names(expr)
        if not names:
            print("FAIL %s: no metric found in %r" % (where, expr))
            bad += 1
        for n in sorted(names):
            used.add(n)
            if n not in known:
                print("FAIL %s: %s is exported by neither the operator nor the trainer (%s)"
                      % (where, n, expr))
                bad += 1
    print("%s   %d queries (%d dashboard, %d rules), %d metrics, each exported: %s"
          % ("ok" if bad == 0 else "FAIL", len(qs), n_dash, n_rules, len(used),
             " ".join(sorted(used))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
