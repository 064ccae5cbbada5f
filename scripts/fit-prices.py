#!/usr/bin/env python3
"""Fit Kerf's compact on-demand price model from AWS's us-east-1 list prices.

Input:  ../shared/data/ec2-on-demand-prices-us-east-1.csv (instance_type,usd_per_hour)
        crates/kerf-aws/data/instance-types.json (vCPUs, memory, accelerators)
Output: crates/kerf-aws/data/price-model.tsv

The model prices an instance type as
    usd_per_vcpu_hour * vcpu + usd_per_gib_hour * memory_gib + usd_per_accelerator_hour * accelerators
with one rate triple per instance family (the part of the name before the dot). Each family
uses the simplest shape that prices every one of its listed types within 2%: vCPU only,
memory only, vCPU + memory, vCPU + accelerator. A type that still breaks its family's
pattern is named as an exception with its own price. kerf-aws checks the model against the
CSV in a test, so a refit that drifts is caught.

Run: python3 scripts/fit-prices.py [CSV]
"""
import csv
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TOLERANCE = 0.02


def accelerators(t):
    return (t.get("gpu") or {}).get("count", 0) + (t.get("neuron") or {}).get("count", 0)


def features(t, shape):
    gib = t["memory_mib"] / 1024.0
    return {
        "vcpu": [t["vcpu"], 0.0, 0.0],
        "memory": [0.0, gib, 0.0],
        "vcpu+memory": [t["vcpu"], gib, 0.0],
        "vcpu+accelerator": [t["vcpu"], 0.0, accelerators(t)],
    }[shape]


def solve(rows, shape):
    """Least squares on relative error (rows weighted by 1/price), over the shape's columns."""
    cols = [i for i in range(3) if any(features(t, shape)[i] for t, _ in rows)]
    if not cols:
        return None
    # normal equations, tiny dense system
    n = len(cols)
    a = [[0.0] * n for _ in range(n)]
    b = [0.0] * n
    for t, p in rows:
        x = [features(t, shape)[c] / p for c in cols]
        for i in range(n):
            b[i] += x[i]
            for j in range(n):
                a[i][j] += x[i] * x[j]
    # gaussian elimination
    for i in range(n):
        piv = max(range(i, n), key=lambda r: abs(a[r][i]))
        if abs(a[piv][i]) < 1e-12:
            return None
        a[i], a[piv] = a[piv], a[i]
        b[i], b[piv] = b[piv], b[i]
        for r in range(n):
            if r != i:
                f = a[r][i] / a[i][i]
                for c in range(i, n):
                    a[r][c] -= f * a[i][c]
                b[r] -= f * b[i]
    rates = [0.0, 0.0, 0.0]
    for i, c in enumerate(cols):
        rates[c] = b[i] / a[i][i]
    if any(r < 0 for r in rates):
        return None
    return [float("%.7g" % r) for r in rates]


def price(t, rates, shape):
    return sum(f * r for f, r in zip(features(t, shape), rates))


def fit_robust(rows, shape):
    """Fit, then drop the worst-priced type and refit while some type is off by over 2%."""
    kept = list(rows)
    while kept:
        rates = solve(kept, shape)
        if rates is None:
            return None
        errors = [abs(price(t, rates, shape) - p) / p for t, p in kept]
        worst = max(range(len(kept)), key=lambda i: errors[i])
        if errors[worst] <= TOLERANCE:
            return rates
        kept.pop(worst)
    return None


def fit_family(rows):
    best = None
    for shape in ["vcpu", "memory", "vcpu+memory", "vcpu+accelerator"]:
        rates = fit_robust(rows, shape)
        if rates is None:
            continue
        bad = [(t, p) for t, p in rows if abs(price(t, rates, shape) - p) > TOLERANCE * p]
        if best is None or len(bad) < len(best[2]):
            best = (shape, rates, bad)
        if not bad:
            break
    return best


def main():
    csv_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "..", "shared", "data", "ec2-on-demand-prices-us-east-1.csv")
    catalog = {t["name"]: t for t in json.load(open(os.path.join(
        ROOT, "crates", "kerf-aws", "data", "instance-types.json")))["types"]}
    prices = {r["instance_type"]: float(r["usd_per_hour"]) for r in csv.DictReader(open(csv_path))}
    families = {}
    for name, p in prices.items():
        if name in catalog and p > 0:
            families.setdefault(name.split(".")[0], []).append((catalog[name], p))
    lines = ["# Kerf on-demand price model, fitted by scripts/fit-prices.py from AWS us-east-1 list prices.",
             "# family<TAB>usd_per_vcpu_hour<TAB>usd_per_gib_hour<TAB>usd_per_accelerator_hour",
             "# exception<TAB>instance_type<TAB>usd_per_hour   (a type that breaks its family's pattern)"]
    exceptions = []
    for fam in sorted(families):
        rows = families[fam]
        shape, rates, bad = fit_family(rows)
        lines.append("%s\t%s\t%s\t%s" % (fam, *("%.7g" % r for r in rates)))
        exceptions += [(t["name"], p) for t, p in bad]
    for name, p in sorted(exceptions):
        lines.append("exception\t%s\t%s" % (name, p))
    with open(os.path.join(ROOT, "crates", "kerf-aws", "data", "price-model.tsv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d families, %d exceptions, %d priced types" % (
        len(families), len(exceptions), sum(len(r) for r in families.values())), file=sys.stderr)


if __name__ == "__main__":
    main()
