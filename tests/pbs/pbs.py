"""A stand-in for PBS Pro's `pbs` hook module, enough to run
contrib/pbs/hpc_ledger_queuejob.py outside PBS (tests/it/budget.rs).

The job comes from the environment: FAKE_PBS_JOB is a JSON object with
`project`, `Account_Name`, `queue`, `Resource_List` (a dict) and
`array_indices_submitted` (an array's `-J` range, as text). accept()
prints ACCEPT, reject(msg) prints REJECT: msg; both end the hook, as PBS's
do (PBS raises SystemExit). FAKE_PBS_SERVER (optional) is the server's
`default_chunk`, `resources_default` and `default_queue` and its queues'
`default_chunk` and `resources_default`: {"default_chunk": {...},
"resources_default": {...}, "default_queue": "q", "queues": {"q": {...}}}.
"""

import json
import os
import sys

LOG_WARNING = 2
hook_config_filename = os.environ.get("FAKE_PBS_HOOK_CONFIG")


class _Resources(dict):
    def __getitem__(self, name):
        return self.get(name)


class _Queue:
    def __init__(self, name, spec=None):
        spec = spec or {}
        self.name = name
        self.default_chunk = _Resources(spec["default_chunk"]) if "default_chunk" in spec else None
        self.resources_default = _Resources(spec["resources_default"]) if "resources_default" in spec else None


class _Server:
    def __init__(self, spec):
        self.default_chunk = _Resources(spec["default_chunk"]) if "default_chunk" in spec else None
        self.resources_default = _Resources(spec["resources_default"]) if "resources_default" in spec else None
        self.default_queue = spec.get("default_queue")
        self._queues = spec.get("queues", {})

    def queue(self, name):
        return _Queue(name, self._queues.get(name))


_SERVER = _Server(json.loads(os.environ.get("FAKE_PBS_SERVER", "{}")))


def server():
    return _SERVER


class _Job:
    def __init__(self, spec):
        self.project = spec.get("project")
        self.Account_Name = spec.get("Account_Name")
        self.queue = _Queue(spec["queue"]) if spec.get("queue") else None
        self.Resource_List = _Resources(spec.get("Resource_List", {}))
        # A pbs.range in PBS; its text (`1-10:2`) is all the hook reads.
        self.array_indices_submitted = spec.get("array_indices_submitted")


class _Event:
    def __init__(self, job):
        self.job = job

    def accept(self):
        print("ACCEPT")
        sys.exit(0)

    def reject(self, message):
        print("REJECT: " + message)
        sys.exit(0)


_EVENT = _Event(_Job(json.loads(os.environ["FAKE_PBS_JOB"])))


def event():
    return _EVENT


def logmsg(level, message):
    print("LOG: " + message, file=sys.stderr)
