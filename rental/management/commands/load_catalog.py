"""Load the GPU catalog and the AWS offerings of rental/data/catalog.json.

Idempotent: GPU models are matched by name, offerings by (account, region, instance type);
a row is written only when a value differs, so a second run changes nothing and says so.
An offering's ``is_available`` flag is set on creation only: an admin who switched an
offering off keeps it off.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import models, transaction
from django.utils.translation import gettext as _

from rental.models import GpuModel, Offering, ProviderAccount

CATALOG_PATH = Path(__file__).resolve().parents[2] / "data" / "catalog.json"
CATALOG_DRIVER = "aws"


class CatalogError(ValueError):
    """The catalog file is not what the loader expects."""


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, outcome: str) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)

    @property
    def changed(self) -> int:
        return self.created + self.updated


@dataclass
class LoadResult:
    gpu_models: Counts = field(default_factory=Counts)
    offerings: Counts = field(default_factory=Counts)
    accounts: list[str] = field(default_factory=list)
    accounts_without_regions: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.gpu_models.changed or self.offerings.changed)


def read_catalog(path: Path = CATALOG_PATH) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogError(f"Cannot read the catalog {path}: {exc}") from None


@transaction.atomic
def load_catalog(
    *, accounts: Iterable[ProviderAccount], catalog: dict[str, Any] | None = None
) -> LoadResult:
    """Create or update every GPU model of the catalog, then every instance type as an
    offering of each account in each of its regions, priced at the catalog's us-east-1
    list prices. Writes only rows whose values differ. Raises ``CatalogError`` for a
    malformed catalog (and writes nothing)."""
    catalog = read_catalog() if catalog is None else catalog
    result = LoadResult()
    models_by_name: dict[str, GpuModel] = {}
    existing_models = {model.name: model for model in GpuModel.objects.all()}
    for entry in _required(catalog, "gpu_models", "catalog"):
        name, values = _gpu_model_values(entry)
        model, outcome = _create_or_update(GpuModel, existing_models.get(name), name=name, **values)
        models_by_name[name] = model
        result.gpu_models.add(outcome)

    offerings = [
        _offering_values(entry, catalog, models_by_name) for entry in _instance_types(catalog)
    ]
    for account in accounts:
        result.accounts.append(account.name)
        if not account.regions:
            result.accounts_without_regions.append(account.name)
        existing = {
            (offering.region, offering.instance_type): offering
            for offering in Offering.objects.filter(account=account)
        }
        for region in account.regions:
            for instance_type, values in offerings:
                _offering, outcome = _create_or_update(
                    Offering,
                    existing.get((region, instance_type)),
                    account=account,
                    region=region,
                    instance_type=instance_type,
                    **values,
                )
                result.offerings.add(outcome)
    return result


def _create_or_update(
    model: type[models.Model], current: models.Model | None, **values: Any
) -> tuple[Any, str]:
    if current is None:
        return model.objects.create(**values), "created"
    changed = [
        name for name, value in values.items() if _stored(current, name) != _comparable(value)
    ]
    if not changed:
        return current, "unchanged"
    for name in changed:
        setattr(current, name, values[name])
    current.save(update_fields=changed)
    return current, "updated"


def _stored(obj: models.Model, name: str) -> Any:
    field_ = obj._meta.get_field(name)
    return getattr(obj, field_.attname)


def _comparable(value: Any) -> Any:
    return value.pk if isinstance(value, models.Model) else value


def _required(data: dict[str, Any], key: str, where: str) -> Any:
    try:
        return data[key]
    except (KeyError, TypeError):
        raise CatalogError(f"{where} has no {key!r}.") from None


def _decimal(data: dict[str, Any], key: str, where: str) -> Decimal:
    raw = _required(data, key, where)
    try:
        value = Decimal(str(raw))
    except InvalidOperation:
        raise CatalogError(f"{where}: {key} {raw!r} is not a number.") from None
    if value < 0:
        raise CatalogError(f"{where}: {key} {raw!r} is negative.")
    return value


def _positive_int(data: dict[str, Any], key: str, where: str) -> int:
    raw = _required(data, key, where)
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise CatalogError(f"{where}: {key} {raw!r} is not a positive whole number.")
    return raw


def _choice(data: dict[str, Any], key: str, where: str, choices: Iterable[str]) -> str:
    value = _required(data, key, where)
    if value not in set(choices):
        raise CatalogError(f"{where}: {key} {value!r} is not one of {sorted(choices)}.")
    return value


def _gpu_model_values(entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = str(_required(entry, "name", "a GPU model"))
    where = f"GPU model {name!r}"
    return name, {
        "vendor": _choice(entry, "vendor", where, GpuModel.Vendor.values),
        "memory_gb": _positive_int(entry, "memory_gb", where),
        "memory_bandwidth_gbps": _positive_int(entry, "memory_bandwidth_gbps", where),
        "bf16_tflops": _decimal(entry, "bf16_tflops", where),
        "fp16_tflops": _decimal(entry, "fp16_tflops", where),
        "interconnect": _choice(entry, "interconnect", where, GpuModel.Interconnect.values),
        "notes": str(entry.get("notes", "")),
    }


def _instance_types(catalog: dict[str, Any]) -> list[dict[str, Any]]:
    entries = _required(catalog, "aws_instance_types", "catalog")
    names = [_required(entry, "instance_type", "an instance type") for entry in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CatalogError(f"Instance types listed twice: {', '.join(duplicates)}.")
    return entries


def _offering_values(
    entry: dict[str, Any], catalog: dict[str, Any], models_by_name: dict[str, GpuModel]
) -> tuple[str, dict[str, Any]]:
    instance_type = str(entry["instance_type"])
    where = f"instance type {instance_type!r}"
    model_name = _required(entry, "gpu_model", where)
    if model_name not in models_by_name:
        raise CatalogError(f"{where}: GPU model {model_name!r} is not in the catalog.")
    price_date = _required(entry, "price_date", where)
    try:
        taken_on = date.fromisoformat(price_date)
    except (TypeError, ValueError):
        raise CatalogError(f"{where}: price_date {price_date!r} is not an ISO date.") from None
    on_demand = _decimal(entry, "on_demand_per_hour", where)
    spot = _decimal(entry, "spot_estimate_per_hour", where)
    if on_demand == 0 or spot > on_demand:
        raise CatalogError(f"{where}: prices must be positive and spot at most on-demand.")
    return instance_type, {
        "gpu_model": models_by_name[model_name],
        "gpus_per_instance": _positive_int(entry, "gpus", where),
        "vcpus": _positive_int(entry, "vcpus", where),
        "memory_gib": _positive_int(entry, "memory_gib", where),
        "on_demand_price_per_hour": on_demand,
        "spot_price_per_hour": spot,
        "storage_price_per_gb_month": _decimal(catalog, "storage_price_per_gb_month", "catalog"),
        "currency": _choice(catalog, "currency", "catalog", Offering.Currency.values),
        "price_updated_at": taken_on,
    }


class Command(BaseCommand):
    @property
    def help(self) -> str:  # argparse needs a str, so translate when asked, not lazily
        return _(
            "Load the GPU models and the AWS GPU instance types of rental/data/catalog.json. "
            "GPU models are always loaded; offerings are loaded for the account named with "
            "--account, or else for every active account whose driver is 'aws', in each of the "
            "account's regions, all priced at the catalog's us-east-1 list prices. Idempotent: "
            "a second run changes nothing."
        )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--account",
            metavar="NAME",
            help=_(
                "Load offerings for this provider account only (default: every active "
                "'aws' account). Prices are us-east-1 list prices in every region."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        accounts = self._accounts(options["account"])
        try:
            result = load_catalog(accounts=accounts)
        except CatalogError as exc:
            raise CommandError(str(exc)) from None
        for name in result.accounts_without_regions:
            self.stderr.write(
                _("Account “%(name)s” lists no regions: no offerings loaded for it.")
                % {"name": name}
            )
        self.stdout.write(self._summary(result))

    def _accounts(self, name: str | None) -> list[ProviderAccount]:
        if name is None:
            return list(ProviderAccount.objects.filter(is_active=True, driver=CATALOG_DRIVER))
        try:
            account = ProviderAccount.objects.get(name=name)
        except ProviderAccount.DoesNotExist:
            raise CommandError(
                _("No provider account is named “%(name)s”.") % {"name": name}
            ) from None
        if account.driver != CATALOG_DRIVER:
            raise CommandError(
                _(
                    "Account “%(name)s” uses the driver “%(driver)s”; the catalog lists AWS "
                    "instance types only."
                )
                % {"name": name, "driver": account.driver}
            )
        return [account]

    def _summary(self, result: LoadResult) -> str:
        if not result.changed:
            return _(
                "Catalog already up to date: %(models)d GPU models and %(offerings)d "
                "offerings unchanged, nothing written."
            ) % {"models": result.gpu_models.unchanged, "offerings": result.offerings.unchanged}
        return _(
            "Catalog loaded: GPU models %(m_created)d created, %(m_updated)d updated, "
            "%(m_unchanged)d unchanged; offerings %(o_created)d created, %(o_updated)d updated, "
            "%(o_unchanged)d unchanged for %(accounts)d account(s) at us-east-1 prices."
        ) % {
            "m_created": result.gpu_models.created,
            "m_updated": result.gpu_models.updated,
            "m_unchanged": result.gpu_models.unchanged,
            "o_created": result.offerings.created,
            "o_updated": result.offerings.updated,
            "o_unchanged": result.offerings.unchanged,
            "accounts": len(result.accounts),
        }
