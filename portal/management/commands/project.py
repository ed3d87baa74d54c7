"""``manage.py project export SLUG`` and ``manage.py project apply FILE [--dry-run] --as USER``."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal import projectconfig
from portal.errors import DomainError
from portal.models import Project


class Command(BaseCommand):
    help = "Export or apply a project's configuration as YAML."

    def add_arguments(self, parser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="Print a project's configuration.")
        export.add_argument("slug")
        apply = sub.add_parser("apply", help="Check and apply a configuration file.")
        apply.add_argument("file")
        apply.add_argument("--dry-run", action="store_true", help="Show the changes only.")
        apply.add_argument("--as", dest="username", required=True, help="Who applies it.")

    def handle(self, *args, **options) -> None:
        if options["action"] == "export":
            project = Project.objects.filter(slug=options["slug"]).first()
            if project is None:
                raise CommandError(f"No project “{options['slug']}”.")
            self.stdout.write(projectconfig.export_project(project), ending="")
            return
        actor = (
            get_user_model().objects.filter(username=options["username"], is_active=True).first()
        )
        if actor is None:
            raise CommandError(f"No active user “{options['username']}”.")
        try:
            with open(options["file"], encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            raise CommandError(str(error)) from None
        try:
            plan = projectconfig.plan(text, actor=actor)
            for change in plan.changes or ["no changes"]:
                self.stdout.write(change)
            if not options["dry_run"]:
                projectconfig.apply(plan, actor=actor)
                self.stdout.write(f"Applied {len(plan.changes)} change(s).")
        except DomainError as error:
            raise CommandError(error.message) from None
