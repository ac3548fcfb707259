"""PBS Pro queuejob hook: refuse a job whose project cannot pay for it.

hpc-ledger (docs/budgets.md, docs/pbs.md). At submission, PBS runs this hook;
it asks `hpc-ledger serve` (POST /check) whether the job's project has enough
left for the job's whole walltime, at its own rates and discount, and rejects
the job with the ledger's reason if not:

    qsub: hpc-ledger: project PAS1234 may not start this job: the job may cost
    64.51 but the project has 26.84 remaining

Install (as the PBS administrator):

    qmgr -c "create hook hpc_ledger event=queuejob"
    qmgr -c "import hook hpc_ledger application/x-python default hpc_ledger_queuejob.py"
    qmgr -c "import hook hpc_ledger application/x-config default hpc_ledger.json"

with hpc_ledger.json, e.g.:

    {"url": "http://ledger.example.edu:8080", "cluster": "pitzer",
     "basic": "pbs:SECRET", "on_unreachable": "allow", "timeout": 5}

`on_unreachable` is what happens when the ledger cannot be asked: "allow"
(fail open, the default: an outage of the ledger never stops the machine) or
"deny" (fail closed: no job is queued unpaid). An answer of 401 or 403 (the
`basic` credentials are refused, by serve or a proxy before it) is not an
outage: the job is rejected saying so, whatever `on_unreachable` says, so that
a wrong credential never lets every job start unchecked. A job without a project, or a
project that is not budgeted, is accepted. Only the Python standard library
and the `pbs` module are used.

An array job (`qsub -J 1-1000`) is checked whole: its subjobs
(`array_indices_submitted`) times what one may cost.

A `select` chunk that names no `ncpus`, `mem` or `ngpus` gets them from the
job's queue's `default_chunk`, else the server's, when PBS applies them
after this hook; the job is charged for what they add up to
(`Resource_List.ncpus`, docs/pbs.md), so the hook adds them before asking.
It reads them from the `pbs` module (`pbs.server()` and its queue); a
`"default_chunk": {"ncpus": 36}` in the configuration is used where the
module gives none.
"""

import base64
import json
import urllib.error
import urllib.request

import pbs

DEFAULTS = {"url": "http://127.0.0.1:8080", "cluster": "", "basic": "", "on_unreachable": "allow", "timeout": 5}


def config():
    cfg = dict(DEFAULTS)
    name = getattr(pbs, "hook_config_filename", None)
    if name:
        try:
            with open(name) as f:
                cfg.update(json.load(f))
        except (OSError, ValueError) as e:
            pbs.logmsg(pbs.LOG_WARNING, "hpc-ledger hook: cannot read %s: %s" % (name, e))
    return cfg


CHUNK = ("ncpus", "mem", "ngpus")


def queue_name(job):
    """The job's queue: its own, else the server's `default_queue`, where
    PBS puts a job that names none (after this hook)."""
    if job.queue is not None:
        return job.queue.name
    try:
        queue = getattr(pbs.server(), "default_queue", None)
    except Exception as e:  # noqa: BLE001 - a pbs module without it
        pbs.logmsg(pbs.LOG_WARNING, "hpc-ledger hook: default_queue not read: %s" % e)
        return None
    return str(queue) if queue else None


def holders(job):
    """The server, then the job's queue: whose defaults PBS applies (the
    queue's win)."""
    found = []
    try:
        server = pbs.server()
        found.append(server)
        queue = queue_name(job)
        if queue:
            found.append(server.queue(queue))
    except Exception as e:  # noqa: BLE001 - a pbs module without them: the configuration's
        pbs.logmsg(pbs.LOG_WARNING, "hpc-ledger hook: the server's defaults not read: %s" % e)
    return found


def default_walltime(job):
    """The walltime PBS gives a job that names none: its queue's
    `resources_default.walltime`, else the server's."""
    walltime = None
    for holder in holders(job):
        defaults = getattr(holder, "resources_default", None)
        if defaults is None:
            continue
        try:
            value = defaults["walltime"]
        except Exception:  # noqa: BLE001 - not set
            value = None
        if value is not None:
            walltime = value
    return walltime


def chunk_defaults(job, cfg):
    """What PBS gives a select chunk for each of CHUNK it does not name:
    the configuration's `default_chunk`, then the server's, then the job's
    queue's (each later one wins), as far as the `pbs` module gives them."""
    fill = {}
    for name, value in (cfg.get("default_chunk") or {}).items():
        if name in CHUNK and value is not None:
            fill[name] = str(value)
    for holder in holders(job):
        defaults = getattr(holder, "default_chunk", None)
        if defaults is None:
            continue
        for name in CHUNK:
            try:
                value = defaults[name]
            except Exception:  # noqa: BLE001 - not set
                value = None
            if value is not None:
                fill[name] = str(value)
    return fill


def with_defaults(select, fill):
    """`select` with each chunk given what `fill` has and it names not."""
    chunks = []
    for chunk in str(select).split("+"):
        fields = chunk.split(":")
        named = {f.split("=", 1)[0] for f in fields if "=" in f}
        fields += ["%s=%s" % (name, fill[name]) for name in CHUNK if name in fill and name not in named]
        chunks.append(":".join(fields))
    return "+".join(chunks)


def resources(job, fill=None):
    """The job's request in the syntax hpc-ledger reads for PBS, each
    `select` chunk with the defaults PBS will give it (`fill`)."""
    rl = job.Resource_List
    parts = []
    select = rl["select"]
    nodes = rl["nodes"]
    if select is not None:
        parts.append("select=%s" % with_defaults(select, fill or {}))
    elif nodes is not None:
        parts.append("nodes=%s" % nodes)
    for name in ("ncpus", "mem", "ngpus"):
        value = rl[name]
        if value is not None and select is None:
            parts.append("%s=%s" % (name, value))
    place = rl["place"]
    if place is not None:
        parts.append("place=%s" % place)
    return ",".join(parts) or "ncpus=1"


def subjobs(job):
    """How many subjobs an array job (`qsub -J X-Y[:Z]`) has; 1 for a job.

    Each may run its whole walltime, so an array is checked whole: a
    1,000-subjob array is not let in on the price of one. `None` when its
    indices cannot be read (the hook then rejects it: it cannot be priced).
    """
    indices = getattr(job, "array_indices_submitted", None)
    if indices is None or str(indices).strip() == "":
        return 1
    total = 0
    try:
        for part in str(indices).split("%")[0].split(","):
            span, _, step = part.strip().partition(":")
            first, _, last = span.partition("-")
            first = int(first)
            last = int(last) if last else first
            step = int(step) if step else 1
            if step < 1 or last < first:
                return None
            total += (last - first) // step + 1
    except ValueError:
        return None
    return total


def main():
    event = pbs.event()
    job = event.job
    cfg = config()
    # The project a PBS record is charged to: its account (hpc-ledger reads
    # `account` first, docs/pbs.md), else its PBS Pro project.
    project = job.Account_Name or job.project
    if not project:
        event.accept()
    # What PBS gives a job that names no walltime or queue, after this hook.
    walltime = job.Resource_List["walltime"]
    if walltime is None:
        walltime = default_walltime(job)
    tasks = subjobs(job)
    if tasks is None:
        event.reject("hpc-ledger: the job cannot be priced: its array indices %r cannot be read"
                     % str(job.array_indices_submitted))
    ask = {
        "project": str(project),
        "cluster": cfg["cluster"],
        "resources": resources(job, chunk_defaults(job, cfg)),
        "walltime": str(walltime) if walltime is not None else None,
        "queue": queue_name(job),
    }
    # Only for an array: a serve before `tasks` refuses a field it does not
    # know, and every job would be rejected as unpriceable.
    if tasks > 1:
        ask["tasks"] = tasks
    request = urllib.request.Request(
        cfg["url"].rstrip("/") + "/check",
        data=json.dumps(ask).encode(),
        headers={"Content-Type": "application/json"},
    )
    if cfg["basic"]:
        token = base64.b64encode(cfg["basic"].encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    answer = None
    why = ""
    priced = True
    misconfigured = False
    try:
        with urllib.request.urlopen(request, timeout=float(cfg["timeout"])) as reply:
            answer = json.load(reply)
    except urllib.error.HTTPError as e:
        try:
            detail = e.read().decode(errors="replace")
        except Exception:  # noqa: BLE001 - any failure to read the reply
            detail = ""
        if e.code in (400, 422):
            priced = False
        # The hook's credentials were refused, by serve (401) or a proxy
        # before it (403): how the hook is set up, not an outage, so
        # on_unreachable does not apply (a wrong credential must not let
        # every job start unchecked). A 404 stays an outage: a proxy
        # answers it while serve restarts.
        if e.code in (401, 403):
            misconfigured = True
        why = "HTTP %d: %s" % (e.code, " ".join(detail.split())[:200])
    except Exception as e:  # noqa: BLE001 - the ledger could not be asked, whatever the reason
        why = str(e)
    if not priced:
        event.reject("hpc-ledger: the job cannot be priced: %s" % why)
    if misconfigured:
        pbs.logmsg(pbs.LOG_WARNING, "hpc-ledger hook: the hook's basic credentials were refused (%s)" % why)
        event.reject("hpc-ledger: the budget check is set up wrong (%s); tell the site's administrators" % why)
    if answer is None:
        pbs.logmsg(pbs.LOG_WARNING, "hpc-ledger hook: the ledger could not be asked (%s)" % why)
        if cfg["on_unreachable"] == "deny":
            event.reject("hpc-ledger: the ledger could not be asked, and this site queues no job unchecked")
        event.accept()
    if answer.get("allowed"):
        event.accept()
    event.reject("hpc-ledger: project %s may not start this job: %s" % (project, answer.get("reason", "")))


main()
