from django.core.management.base import BaseCommand

from portal.i18n import compile_catalogs


class Command(BaseCommand):
    help = "Compile the translation catalogs (.po → .mo) that changed, without GNU gettext."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="Compile every catalog.")

    def handle(self, *args, force: bool = False, **options):
        for path in compile_catalogs(force=force):
            self.stdout.write(f"compiled {path}")
