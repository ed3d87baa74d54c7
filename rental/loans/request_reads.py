"""What a submission reads before it takes the pool lock, in one round trip.

R1 and the pending limit need four things: how many requests the asker has waiting,
the project's quota for the GPU model, the offerings that sell the model, and the
images the project may use. Every admission reads them, and compiling four ORM queries
cost more of a submission's time than the database took to answer them
(``bench/admission.py``). On PostgreSQL they are therefore written out and sent at once
(psycopg's pipeline mode), and the rows are turned into model instances as the ORM
would (``from_db``, with the fields' own conversions). Elsewhere (SQLite in the demo)
the ORM reads them one by one. ``tests/rental/loans/test_request_reads.py`` checks that both
paths return the same rows, field by field, over every combination of the filters.
"""

from dataclasses import dataclass
from functools import cache

from django.db import connection
from django.db.models import Model

from portal.models import Project
from rental import selectors
from rental.loans.pending_limit import WAITING, waiting_count
from rental.models import GpuModel, Image, Offering, ProviderAccount, Quota


@dataclass(frozen=True)
class RequestReads:
    """The rows R1 decides on, read together."""

    waiting: int | None  # the asker's waiting requests; None when nobody asked for it
    quota: Quota | None
    offerings: list[Offering]  # available, on active accounts, account and model loaded
    images: list[Image]  # usable by the project, by name (see ``selectors.images_for``)

    def images_on(self, offering: Offering) -> list[Image]:
        """The images a lease on ``offering`` may boot, by name."""
        return [
            image
            for image in self.images
            if image.account_id == offering.account_id and image.region == offering.region
        ]


def read_for_request(*, actor, project: Project, gpu_model: GpuModel) -> RequestReads:
    """The rows a request for ``gpu_model`` in ``project`` is checked against; with
    ``actor``, also how many requests they have waiting."""
    if connection.vendor != "postgresql":
        return _read_with_orm(actor=actor, project=project, gpu_model=gpu_model)
    connection.ensure_connection()
    pipeline = getattr(connection.connection, "pipeline", None)
    if pipeline is None:
        return _read_with_orm(actor=actor, project=project, gpu_model=gpu_model)
    sql = _statements()
    with (
        connection.cursor() as waiting,
        connection.cursor() as quota,
        connection.cursor() as offerings,
        connection.cursor() as images,
    ):
        with connection.wrap_database_errors, pipeline():
            if actor is not None:
                waiting.execute(sql.waiting, [actor.pk, *WAITING])
            quota.execute(sql.quota, [project.pk, gpu_model.pk])
            offerings.execute(sql.offerings, [gpu_model.pk, True, True])
            images.execute(
                sql.images, [True, Image.State.AVAILABLE, project.pk, gpu_model.pk, True]
            )
        row = quota.fetchone()
        return RequestReads(
            waiting=waiting.fetchone()[0] if actor is not None else None,
            quota=None if row is None else _instance(Quota, row),
            offerings=[_offering(row, gpu_model) for row in offerings.fetchall()],
            images=[_image(row) for row in images.fetchall()],
        )


def _read_with_orm(*, actor, project: Project, gpu_model: GpuModel) -> RequestReads:
    return RequestReads(
        waiting=None if actor is None else waiting_count(actor),
        quota=selectors.quota_for(project, gpu_model),
        offerings=list(selectors.offerings_of(gpu_model)),
        images=list(selectors.images_for(project=project)),
    )


# --- The statements, written from the models' own metadata ---------------------------


@dataclass(frozen=True)
class _Sql:
    waiting: str
    quota: str
    offerings: str
    images: str


def _columns(model: type[Model], alias: str) -> str:
    return ", ".join(f'{alias}."{field.column}"' for field in _fields(model))


@cache
def _fields(model: type[Model]) -> tuple:
    return tuple(model._meta.concrete_fields)


@cache
def _statements() -> _Sql:
    lease = "rental_reservation"
    offering, account = Offering._meta.db_table, ProviderAccount._meta.db_table
    image, project = Image._meta.db_table, Project._meta.db_table
    placeholders = ", ".join("%s" for _status in WAITING)
    return _Sql(
        waiting=f"SELECT COUNT(*) FROM {lease} WHERE requester_id = %s"
        f" AND status IN ({placeholders})",
        # As ``selectors.quota_for``: one quota per project and model, the first by key.
        quota=f"SELECT {_columns(Quota, 'q')} FROM {Quota._meta.db_table} q"
        " WHERE q.project_id = %s AND q.gpu_model_id = %s ORDER BY q.id LIMIT 1",
        # As ``selectors.offerings_of``.
        offerings=f"SELECT {_columns(Offering, 'o')}, {_columns(ProviderAccount, 'a')}"
        f" FROM {offering} o JOIN {account} a ON a.id = o.account_id"
        " WHERE o.gpu_model_id = %s AND o.is_available = %s AND a.is_active = %s"
        " ORDER BY o.gpus_per_instance, o.on_demand_price_per_hour, o.id",
        # As ``selectors.images_for``; only those in the accounts and regions where an
        # offering sells the model, as no other can be booted for it.
        images=f"SELECT {_columns(Image, 'i')}, {_columns(Project, 'p')}"
        f" FROM {image} i LEFT JOIN {project} p ON p.id = i.project_id"
        " WHERE i.is_active = %s AND i.state = %s"
        " AND (i.project_id IS NULL OR i.project_id = %s)"
        f" AND EXISTS (SELECT 1 FROM {offering} o WHERE o.gpu_model_id = %s"
        " AND o.account_id = i.account_id AND o.region = i.region AND o.is_available = %s)"
        " ORDER BY i.name, i.id",
    )


def _instance(model: type[Model], row) -> Model:
    """A model instance from its columns, converted as the ORM converts them (on
    PostgreSQL only a field's own ``from_db_value``, e.g. JSON, changes a value)."""
    fields = _fields(model)
    values = [
        field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
        for field, value in zip(fields, row, strict=True)
    ]
    return model.from_db(connection.alias, [field.attname for field in fields], values)


def _offering(row, gpu_model: GpuModel) -> Offering:
    width = len(_fields(Offering))
    offering = _instance(Offering, row[:width])
    offering.account = _instance(ProviderAccount, row[width:])
    offering.gpu_model = gpu_model
    return offering


def _image(row) -> Image:
    width = len(_fields(Image))
    image = _instance(Image, row[:width])
    image.project = None if image.project_id is None else _instance(Project, row[width:])
    return image
