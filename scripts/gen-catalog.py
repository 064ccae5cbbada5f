#!/usr/bin/env python3
"""Rebuild Kerf's embedded EC2 instance-type catalog from the installed moto package.

moto ships AWS's DescribeInstanceTypes answers and per-zone DescribeInstanceTypeOfferings
answers as gzipped JSON resources. This script keeps only the facts Kerf derives capacity,
allocatable and labels from, and writes two compact files that the kerf-aws crate embeds:

  crates/kerf-aws/data/instance-types.json   one object per instance type
  crates/kerf-aws/data/offerings.json        region -> zones and, per type, its zones

Run it after upgrading moto:  python3 scripts/gen-catalog.py
With --region R it writes nothing and prints, as JSON, what moto itself would answer for R
(the compact facts of every type and the zones offering each): the test of Kerf's reader of
DescribeInstanceTypes compares its answers with these.
"""
import gzip
import json
import os
import sys

import moto

RESOURCES = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "kerf-aws", "data")

ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def load(path):
    with gzip.open(path) as f:
        return json.load(f)


def kebab(name):
    return "-".join(name.lower().replace("_", " ").split())


def compact(entry):
    """The facts of one DescribeInstanceTypes entry that Kerf uses, or None to skip it."""
    archs = [ARCH[a] for a in entry["ProcessorInfo"]["SupportedArchitectures"] if a in ARCH]
    if not archs:
        return None  # mac instances need dedicated hosts; Karpenter does not launch them
    net = entry["NetworkInfo"]
    out = {
        "name": entry["InstanceType"],
        "vcpu": entry["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": entry["MemoryInfo"]["SizeInMiB"],
        "arch": archs[-1] if "arm64" in archs else archs[0],
        "hypervisor": entry.get("Hypervisor", ""),
        "bare_metal": entry["BareMetal"],
        "current_generation": entry["CurrentGeneration"],
        "max_enis": net["MaximumNetworkInterfaces"],
        "ipv4_per_eni": net["Ipv4AddressesPerInterface"],
        "encryption_in_transit": net.get("EncryptionInTransitSupported", False),
        "spot": "spot" in entry["SupportedUsageClasses"],
    }
    cards = net.get("NetworkCards") or []
    if cards and all("BaselineBandwidthInGbps" in c for c in cards):
        out["network_bandwidth_mbps"] = int(round(sum(c["BaselineBandwidthInGbps"] for c in cards) * 1000))
    clock = entry["ProcessorInfo"].get("SustainedClockSpeedInGhz")
    if clock:
        out["cpu_clock_mhz"] = int(round(clock * 1000))
    if entry["ProcessorInfo"].get("Manufacturer"):
        out["cpu_manufacturer"] = kebab(entry["ProcessorInfo"]["Manufacturer"])
    ebs = entry.get("EbsInfo", {}).get("EbsOptimizedInfo")
    if ebs:
        out["ebs_bandwidth_mbps"] = ebs["MaximumBandwidthInMbps"]
    storage = entry.get("InstanceStorageInfo")
    if storage and storage.get("NvmeSupport") in ("required", "supported"):
        out["local_nvme_gb"] = storage["TotalSizeInGB"]
    gpus = (entry.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        gpu = gpus[0]
        out["gpu"] = {
            "name": kebab(gpu["Name"]),
            "manufacturer": kebab(gpu["Manufacturer"]),
            "count": sum(g["Count"] for g in gpus),
            "memory_mib": gpu["MemoryInfo"]["SizeInMiB"],
        }
    neuron = (entry.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if neuron:
        dev = neuron[0]
        out["neuron"] = {
            "name": kebab(dev["Name"]),
            "count": sum(d["Count"] for d in neuron),
            "cores": sum(d["Count"] * d["CoreInfo"]["Count"] for d in neuron),
        }
    # what EC2NodeClass launch options need of a type (Karpenter's compatibility checks)
    if entry.get("NitroEnclavesSupport") == "supported":
        out["nitro_enclaves"] = True
    if "nested-virtualization" in (entry["ProcessorInfo"].get("SupportedFeatures") or []):
        out["nested_virtualization"] = True
    if len(cards) > 1:
        by_index = {c["NetworkCardIndex"]: c["MaximumNetworkInterfaces"] for c in cards}
        out["network_cards"] = [by_index.get(i, 0) for i in range(max(by_index) + 1)]
    efa = net.get("EfaInfo")
    if efa:
        out["max_efa"] = efa["MaximumEfaInterfaces"]
    return out


# Types users name in their NodePools that moto's describe-instance-types data lacks, with
# the facts from the EC2 instance type pages (P3: Xeon E5-2686 v4, Tesla V100 16 GiB). They
# are offered wherever moto offers their sibling `like`.
SUPPLEMENT = [
    {"like": "p3dn.24xlarge", "arch": "amd64", "bare_metal": False, "cpu_clock_mhz": 2300,
     "cpu_manufacturer": "intel", "current_generation": True, "ebs_bandwidth_mbps": ebs,
     "encryption_in_transit": False, "hypervisor": "xen", "ipv4_per_eni": per_eni,
     "max_enis": enis, "memory_mib": mem, "name": name, "network_bandwidth_mbps": net,
     "spot": True, "vcpu": vcpu,
     "gpu": {"count": gpus, "manufacturer": "nvidia", "memory_mib": 16384, "name": "v100"}}
    for name, vcpu, mem, gpus, ebs, net, enis, per_eni in [
        ("p3.2xlarge", 8, 62464, 1, 1750, 10000, 4, 15),
        ("p3.8xlarge", 32, 249856, 4, 7000, 10000, 8, 30),
        ("p3.16xlarge", 64, 499712, 8, 14000, 25000, 8, 30),
    ]
]


def region_answer(region):
    """The compact facts of every type and, per type, the zones of `region` offering it."""
    types = load(os.path.join(RESOURCES, "instance_types.json.gz"))
    catalog = sorted((c for c in (compact(t) for t in types.values()) if c), key=lambda c: c["name"])
    rows = load(os.path.join(RESOURCES, "instance_type_offerings", "availability-zone", region + ".json.gz"))
    zones = {}
    for r in rows:
        zones.setdefault(r["InstanceType"], set()).add(r["Location"])
    return {"types": catalog, "zones": {t: sorted(z) for t, z in sorted(zones.items())}}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--region":
        json.dump(region_answer(sys.argv[2]), sys.stdout)
        return
    types = load(os.path.join(RESOURCES, "instance_types.json.gz"))
    catalog = [c for c in (compact(t) for t in types.values()) if c]
    present = {c["name"] for c in catalog}
    like = {}
    for extra in SUPPLEMENT:
        extra = dict(extra)
        sibling = extra.pop("like")
        if extra["name"] not in present:
            catalog.append(extra)
            like[extra["name"]] = sibling
    catalog.sort(key=lambda c: c["name"])
    known = {c["name"] for c in catalog}

    zone_dir = os.path.join(RESOURCES, "instance_type_offerings", "availability-zone")
    offerings = {}
    for fname in sorted(os.listdir(zone_dir)):
        region = fname.split(".")[0]
        rows = load(os.path.join(zone_dir, fname))
        zones = sorted({r["Location"] for r in rows})
        by_type = {}
        for r in rows:
            if r["InstanceType"] in known:
                by_type.setdefault(r["InstanceType"], set()).add(zones.index(r["Location"]))
        for name, sibling in like.items():
            if sibling in by_type:
                by_type[name] = set(by_type[sibling])
        offerings[region] = {
            "zones": zones,
            "types": {t: sorted(z) for t, z in sorted(by_type.items())},
        }

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "instance-types.json"), "w") as f:
        f.write('{"source":"moto %s","types":[\n' % moto.__version__)
        f.write(",\n".join(json.dumps(c, separators=(",", ":"), sort_keys=True) for c in catalog))
        f.write("\n]}\n")
    with open(os.path.join(OUT, "offerings.json"), "w") as f:
        f.write('{"source":"moto %s","regions":{\n' % moto.__version__)
        f.write(",\n".join(
            json.dumps(r) + ":" + json.dumps(o, separators=(",", ":"), sort_keys=True)
            for r, o in offerings.items()))
        f.write("\n}}\n")
    print(f"{len(catalog)} instance types, {len(offerings)} regions", file=sys.stderr)


if __name__ == "__main__":
    main()
