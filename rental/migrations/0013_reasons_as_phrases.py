"""A lease's reason, an instance's health detail and last error, a data volume's last
error and an image's state detail kept as phrases (portal.phrases), said in the
reader's language.

Each moves from a text column to a JSON column that holds a phrase; the text of every row
written before is kept as it is (a JSON string) and reads as it did. Going back writes
each phrase's English words into the text columns.
"""

from django.db import migrations
from django.utils import translation

import portal.phrases

# model: (old text field, its maximum length)
FIELDS = {
    "reservation": (("status_message", 300),),
    "instance": (("last_error", 500), ("health_message", 300)),
    "datavolume": (("last_error", 500),),
    "image": (("state_message", 300),),
}


def _new(name: str) -> str:
    return f"{name}_phrase"


def keep_old_texts(apps, schema_editor) -> None:
    for model_name, fields in FIELDS.items():
        model = apps.get_model("rental", model_name)
        _copy(model, [(old, _new(old), None) for old, _length in fields])


def say_in_english(apps, schema_editor) -> None:
    with translation.override("en"):
        for model_name, fields in FIELDS.items():
            model = apps.get_model("rental", model_name)
            _copy(model, [(_new(old), old, length) for old, length in fields])


def _copy(model, pairs, batch_size=1000) -> None:
    sources = [source for source, _target, _length in pairs]
    targets = [target for _source, target, _length in pairs]
    changed = []
    for pk, *values in model.objects.values_list("pk", *sources).iterator(chunk_size=batch_size):
        if not any(values):
            continue
        row = model(pk=pk)
        for (_source, target, length), value in zip(pairs, values, strict=True):
            text = portal.phrases.render(value)[:length] if length else value
            setattr(row, target, text or "")
        changed.append(row)
        if len(changed) >= batch_size:
            model.objects.bulk_update(changed, targets)
            changed = []
    if changed:
        model.objects.bulk_update(changed, targets)


def _operations() -> list:
    adds, removes, renames = [], [], []
    for model_name, fields in FIELDS.items():
        for old, _length in fields:
            verbose = {
                "status_message": "reason",
                "last_error": "last error",
                "health_message": "health detail",
                "state_message": "state detail",
            }[old]
            adds.append(
                migrations.AddField(
                    model_name=model_name,
                    name=_new(old),
                    field=portal.phrases.PhraseField(blank=True, default=str, verbose_name=verbose),
                )
            )
            removes.append(migrations.RemoveField(model_name=model_name, name=old))
            renames.append(
                migrations.RenameField(model_name=model_name, old_name=_new(old), new_name=old)
            )
    return [*adds, migrations.RunPython(keep_old_texts, say_in_english), *removes, *renames]


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0012_pool_degraded_reason"),
    ]

    operations = _operations()
