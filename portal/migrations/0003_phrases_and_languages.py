"""Notifications kept as phrases (portal.phrases), said in the reader's language, and
the language each person reads the portal in.

A notification's subject and body move from text columns to JSON columns that hold a
phrase; the text of every row written before is kept as it is (a JSON string) and reads
as it did. Going back writes each phrase's English words into the text columns.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.utils import translation

import portal.phrases

FIELDS = (("subject", "subject_phrase", 200), ("body", "body_phrase", None))


def keep_old_texts(apps, schema_editor) -> None:
    Notification = apps.get_model("portal", "Notification")
    _copy(Notification, [(old, new) for old, new, _length in FIELDS], lambda value, _n: value)


def say_in_english(apps, schema_editor) -> None:
    Notification = apps.get_model("portal", "Notification")
    with translation.override("en"):
        _copy(
            Notification,
            [(new, old) for old, new, _length in FIELDS],
            lambda value, index: portal.phrases.render(value)[: FIELDS[index][2]],
        )


def _copy(model, pairs, convert, batch_size=1000) -> None:
    sources = [source for source, _target in pairs]
    targets = [target for _source, target in pairs]
    changed = []
    for pk, *values in model.objects.values_list("pk", *sources).iterator(chunk_size=batch_size):
        if not any(values):
            continue
        row = model(pk=pk)
        for index, (target, value) in enumerate(zip(targets, values, strict=True)):
            setattr(row, target, convert(value, index) if value else "")
        changed.append(row)
        if len(changed) >= batch_size:
            model.objects.bulk_update(changed, targets)
            changed = []
    if changed:
        model.objects.bulk_update(changed, targets)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0002_api_tokens"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="LanguagePreference",
            fields=[
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="language_preference",
                        serialize=False,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "language",
                    models.CharField(
                        choices=[("en", "English"), ("zh-hans", "Simplified Chinese")],
                        max_length=16,
                        verbose_name="language",
                    ),
                ),
                (
                    "chosen",
                    models.BooleanField(
                        default=False,
                        help_text="Picked in the user menu, rather than taken from their browser.",
                        verbose_name="picked by the person",
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
            ],
            options={
                "verbose_name": "language preference",
                "verbose_name_plural": "language preferences",
            },
        ),
        migrations.AddField(
            model_name="notification",
            name="subject_phrase",
            field=portal.phrases.PhraseField(blank=True, default=str, verbose_name="subject"),
        ),
        migrations.AddField(
            model_name="notification",
            name="body_phrase",
            field=portal.phrases.PhraseField(blank=True, default=str, verbose_name="body"),
        ),
        migrations.RunPython(keep_old_texts, say_in_english),
        # A default, so that going back can add the column to rows again.
        migrations.AlterField(
            model_name="notification",
            name="subject",
            field=models.CharField(default="", max_length=200, verbose_name="subject"),
        ),
        migrations.RemoveField(model_name="notification", name="subject"),
        migrations.RemoveField(model_name="notification", name="body"),
        migrations.RenameField(
            model_name="notification", old_name="subject_phrase", new_name="subject"
        ),
        migrations.RenameField(model_name="notification", old_name="body_phrase", new_name="body"),
    ]
