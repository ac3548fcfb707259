#!/usr/bin/env python3
"""Independent checks of tests/slurm/e2e.sh: what each job should cost, and
whether a ledger charged exactly that, once.

The expected charges are computed here from Slurm's own accounting (`sacct
--parsable2` with a header) and the center configuration (read with tomllib),
following the rules of docs/rules.md (R1-R5, D1-D3, D8; charging rules
version 2, which every new charge follows), without asking hpc-ledger:

  cores       AllocTRES cpu          memory  AllocTRES mem (K/M/G/T: 1024^n)
  nodes       AllocTRES node         gpus    AllocTRES gres/gpu
  node type   the partition, through [cluster.queues]
  effective   memory / memory_per_core, exactly
  charged     nodes > 1: max(nodes * cores_per_node, cores);
              else min(max(effective, cores), max(cores_per_node, cores))
  core-hours  charged * seconds / 3600, half away from zero at 12 places (shown);
              GPU-hours gpus * seconds / 3600 likewise
  amount      the exact charged * seconds / 3600 * rate, rounded once to cents
              half away from zero

Subcommands (each prints what is wrong and exits 1 if anything is):

  check.py verify CONFIG SACCT LEDGER NAME [--source FMT] [--one-record]
      LEDGER is the tab-separated dump of e2e.sh's LEDGER_SQL. Every job of
      SACCT that started is in the ledger exactly once with the expected
      lines; no other job is; jobs that never started are not.
  check.py same LEDGER_A LEDGER_B NAME_A NAME_B
      the same jobs with the same charge lines (metric, quantity, rate, amount).
  check.py entries LEDGER          the ledger entry ids, one line (to compare runs)
  check.py total CONFIG SACCT      "<jobs started> <jobs never started> <expected total>"
  check.py rows SACCT JOBID...     the sacct rows of these job ids (with array tasks)
"""
import sys
import tomllib
from collections import defaultdict
from datetime import datetime
from fractions import Fraction

UNITS = {"": 1024**2, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def round_half_away(x: Fraction, places: int) -> Fraction:
    scale = 10**places
    n = abs(x) * scale
    r = (n.numerator * 2 + n.denominator) // (2 * n.denominator)  # floor(n + 1/2)
    return Fraction(r if x >= 0 else -r, scale)


def dec(x: Fraction, places: int) -> str:
    """A Fraction with a terminating expansion as a plain decimal string."""
    x = round_half_away(x, places)
    sign = "-" if x < 0 else ""
    n = abs(x) * 10**places
    assert n.denominator == 1
    s = str(n.numerator).rjust(places + 1, "0")
    return f"{sign}{s[:-places]}.{s[-places:]}"


def norm(s: str) -> Fraction:
    return Fraction(s.strip())


def size_bytes(s: str) -> int:
    s = s.strip().upper().removesuffix("B")
    unit = s[-1] if s and s[-1] in UNITS and not s[-1].isdigit() else ""
    num = s[: len(s) - len(unit)]
    return round(Fraction(num) * UNITS[unit])


def config_size(s) -> int:
    s = str(s).strip().upper()
    for suffix, mult in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024), ("B", 1)):
        if s.endswith(suffix):
            return round(Fraction(s[: -len(suffix)]) * mult)
    return int(s)


def load_config(path):
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    clusters = {}
    for c in cfg["cluster"]:
        types = {t["name"]: t for t in c["node_type"]}
        cards = {}
        for card in c["rate_card"]:
            if card["node_type"] in cards:
                sys.exit(f"check.py: {path}: one rate card per node type, please (the test does not date them)")
            cards[card["node_type"]] = {
                "core_hour": Fraction(str(card["core_hour"])),
                "gpu_hour": Fraction(str(card.get("gpu_hour", 0))),
                "mpc": config_size(card["memory_per_core"]),
                "cpn": int(card.get("cores_per_node", types[card["node_type"]]["cores_per_node"])),
            }
        clusters[c["name"].lower()] = {"queues": c.get("queues", {}), "cards": cards}
    projects = {p["code"].lower(): p["code"] for p in cfg.get("project", [])}
    return clusters, projects


def read_sacct(path):
    with open(path) as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    head = lines[0].split("|")
    return [dict(zip(head, l.split("|"))) for l in lines[1:]]


def job_key(jobid: str):
    """sacct's JobID (1234, 1234_7) -> (job id, array index or '')."""
    base, _, idx = jobid.partition("_")
    return (base, idx)


def run_key(jobid: str, start: str):
    """One run of a job: (job id, array index or '', start). A requeued job
    has several runs, told apart by their start (sacct --duplicates)."""
    return job_key(jobid) + (start,)


def show_key(key) -> str:
    base, idx, start = key
    return f"{base}{'_' + idx if idx else ''}@{start}"


def tres(s: str) -> dict:
    out = {}
    for part in filter(None, s.split(",")):
        k, _, v = part.partition("=")
        out[k] = v
    return out


def parse_time(s: str):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")


def expected(config_path, sacct_path):
    """{key: {...}} for every allocation of SACCT; 'lines' is None for jobs that never started."""
    clusters, projects = load_config(config_path)
    out = {}
    for row in read_sacct(sacct_path):
        if "." in row["JobID"]:
            continue  # a step; the file should hold allocations only
        key = run_key(row["JobID"], row["Start"])
        if key in out:
            sys.exit(f"check.py: {sacct_path}: run {show_key(key)} twice")
        job = {"jobid": show_key(key), "state": row["State"], "lines": None, "total": Fraction(0)}
        out[key] = job
        # Never started: no start, or (a job cancelled while pending: sacct then shows
        # Start = End and NCPUS = what it asked for) no allocation at all.
        if row["Start"] in ("", "None", "Unknown") or row["End"] in ("", "None", "Unknown") or not row["AllocTRES"]:
            continue
        cluster = clusters[row["Cluster"].lower()]
        node_type = cluster["queues"][row["Partition"]]
        card = cluster["cards"][node_type]
        alloc = tres(row["AllocTRES"])
        cores = int(alloc["cpu"])
        nodes = int(alloc.get("node", row["NNodes"]))
        mem = size_bytes(alloc["mem"]) if "mem" in alloc else 0
        gpus = int(alloc.get("gres/gpu", 0))
        secs = int((parse_time(row["End"]) - parse_time(row["Start"])).total_seconds())
        effective = Fraction(mem, card["mpc"])
        if nodes > 1:
            charged, by = max(Fraction(nodes * card["cpn"]), Fraction(cores)), "whole_nodes"
        else:
            node = Fraction(max(card["cpn"], cores))
            charged = min(max(effective, Fraction(cores)), node)
            by = "whole_node" if effective > node else "memory" if effective > cores else "cores"
        lines = {}
        core_hours = charged * secs / 3600
        lines["core_hours"] = (
            round_half_away(core_hours, 12), card["core_hour"], round_half_away(core_hours * card["core_hour"], 2))
        if gpus > 0:
            gpu_hours = Fraction(gpus * secs, 3600)
            lines["gpu_hours"] = (
                round_half_away(gpu_hours, 12), card["gpu_hour"], round_half_away(gpu_hours * card["gpu_hour"], 2))
        job.update(
            project=projects.get(row["Account"].lower(), "?" + row["Account"]),
            node_type=node_type, cores=cores, nodes=nodes, mem=mem, gpus=gpus, secs=secs,
            charged=charged, by=by, lines=lines, total=sum(l[2] for l in lines.values()),
        )
    return out


def read_ledger(path):
    """LEDGER_SQL's rows -> {key: {'jobs': set, 'records': {id: (kind, source, project)}, 'entries': [...]}}"""
    jobs = defaultdict(lambda: {"jobs": set(), "records": {}, "entries": {}})
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            (job_id, idx, start, jid, rid, rkind, source, project,
             eid, ekind, metric, qty, rate, amount) = line.rstrip("\n").split("\t")
            j = jobs[(job_id, idx, start)]
            j["jobs"].add(jid)
            j["records"][rid] = (rkind, source, project)
            if eid:
                j["entries"][eid] = (ekind, metric, norm(qty), norm(rate), norm(amount))
    return jobs


def verify(config_path, sacct_path, ledger_path, name, source=None, one_record=False):
    exp = expected(config_path, sacct_path)
    got = read_ledger(ledger_path)
    bad = []
    for key, e in sorted(exp.items()):
        g = got.get(key)
        jid = e["jobid"]
        if e["lines"] is None:
            if g:
                bad.append(f"{name}: job {jid} ({e['state']}) never started but is in the ledger")
            continue
        if not g:
            bad.append(f"{name}: job {jid} ({e['state']}) is missing from the ledger")
            continue
        if len(g["jobs"]) != 1:
            bad.append(f"{name}: job {jid} is in the ledger {len(g['jobs'])} times (job rows {sorted(g['jobs'])})")
        kinds = sorted(r[0] for r in g["records"].values())
        if one_record and len(g["records"]) != 1:
            bad.append(f"{name}: job {jid} has {len(g['records'])} records ({', '.join(kinds)}), expected 1")
        if "original" not in kinds or any(k not in ("original", "revision") for k in kinds):
            bad.append(f"{name}: job {jid} has records of kinds {kinds}")
        first = sorted({r[1] for r in g["records"].values() if r[0] == "original"})
        if source and first != [source]:
            bad.append(f"{name}: job {jid} was first recorded from {first}, expected {source}")
        projects = sorted({r[2] for r in g["records"].values()})
        if projects != [e["project"]]:
            bad.append(f"{name}: job {jid} charged to {projects}, expected {e['project']}")
        lines = defaultdict(list)
        for eid, (ekind, metric, qty, rate, amount) in g["entries"].items():
            if ekind != "job":
                bad.append(f"{name}: job {jid} has a {ekind} entry {eid}")
            lines[metric].append((qty, rate, amount))
        for metric in sorted(set(lines) | set(e["lines"])):
            want = e["lines"].get(metric)
            have = lines.get(metric, [])
            if want is None:
                bad.append(f"{name}: job {jid}: unexpected {metric} line(s) {fmt_lines(have)}")
            elif len(have) != 1:
                bad.append(f"{name}: job {jid}: {len(have)} {metric} lines {fmt_lines(have)}, expected 1 {fmt_line(want)}")
            elif have[0] != want:
                bad.append(f"{name}: job {jid} ({describe(e)}): {metric} {fmt_line(have[0])}, expected {fmt_line(want)}")
    for key in sorted(set(got) - set(exp)):
        bad.append(f"{name}: run {show_key(key)} is in the ledger but not in sacct's output")
    return bad


def describe(e):
    return (f"{e['node_type']}, {e['nodes']} node(s), {e['cores']} cores, {e['mem'] / 1024**2:g} MiB, "
            f"{e['gpus']} GPUs, {e['secs']} s -> {dec(e['charged'], 12).rstrip('0').rstrip('.')} cores by {e['by']}")


def fmt_line(l):
    qty, rate, amount = l
    return f"{dec(qty, 12)} x {dec(rate, 10).rstrip('0')} = {dec(amount, 2)}"


def fmt_lines(ls):
    return "[" + "; ".join(fmt_line(l) for l in ls) + "]"


def charges(ledger):
    return {k: sorted((v[1], v[2], v[3], v[4]) for v in j["entries"].values()) for k, j in ledger.items()}


def same(path_a, path_b, name_a, name_b):
    a, b = charges(read_ledger(path_a)), charges(read_ledger(path_b))
    bad = []
    for key in sorted(set(a) | set(b)):
        jid = show_key(key)
        if key not in a:
            bad.append(f"job {jid} is in {name_b} but not in {name_a}")
        elif key not in b:
            bad.append(f"job {jid} is in {name_a} but not in {name_b}")
        elif a[key] != b[key]:
            show = lambda ls: "; ".join(f"{m} {dec(q, 12)} = {dec(x, 2)}" for m, q, _r, x in ls)
            bad.append(f"job {jid}: {name_a} charged [{show(a[key])}], {name_b} [{show(b[key])}]")
    return bad


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "verify":
        args = [a for a in argv[2:] if not a.startswith("--")]
        source = None
        if "--source" in argv:
            source = argv[argv.index("--source") + 1]
            args.remove(source)
        bad = verify(*args[:4], source=source, one_record="--one-record" in argv)
    elif cmd == "same":
        bad = same(*argv[2:6])
    elif cmd == "entries":
        ledger = read_ledger(argv[2])
        print(" ".join(sorted((e for j in ledger.values() for e in j["entries"]), key=int)))
        return 0
    elif cmd == "total":
        exp = expected(argv[2], argv[3])
        started = [e for e in exp.values() if e["lines"] is not None]
        print(len(started), len(exp) - len(started), dec(sum((e["total"] for e in started), Fraction(0)), 2))
        return 0
    elif cmd == "rows":
        want = set(argv[3:])
        for row in read_sacct(argv[2]):
            if job_key(row["JobID"])[0] in want or row["JobIDRaw"] in want:
                print(row["JobID"], row["State"], row["Start"], row["End"], row["AllocTRES"], sep="\t")
        return 0
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for b in bad:
        print("MISMATCH " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
