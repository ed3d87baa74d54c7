"""The demo's broker (kombu's filesystem transport) never shows a reader a message before
it is written in full: a worker that took a half-written one died, and the demo with it."""

import json
import os

from kombu import Connection

from portal.demo_broker import Transport


def connection(folder):
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir(exist_ok=True)
    return Connection(
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        },
    )


def test_a_message_appears_under_its_queue_name_only_once_written(tmp_path, monkeypatch):
    queue = tmp_path / "queue"
    seen = []
    real_replace = os.replace

    def replace(source, target):
        # At the moment the message takes its name, it is already complete, and nothing
        # under a queue name existed before it.
        seen.append(json.loads((queue / os.path.basename(source)).read_bytes()))
        assert not any(name.endswith(".celery.msg") for name in os.listdir(queue))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with connection(tmp_path) as conn:
        simple = conn.SimpleQueue("celery")
        simple.put({"task": "rental.tasks.sync_instances_task"})
        assert len(seen) == 1
        assert [n for n in os.listdir(queue) if not n.startswith(".")] == [
            n for n in os.listdir(queue) if n.endswith(".celery.msg")
        ]
        message = simple.get(timeout=5)
        assert message.payload == {"task": "rental.tasks.sync_instances_task"}
        message.ack()
        simple.close()
    assert os.listdir(queue) == []
