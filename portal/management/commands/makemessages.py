"""Django's makemessages, also reading the two forms of a phrase kept for later
(``portal.phrases.plural_noop``) as one catalog entry with a plural: the way Django's
documentation gives for adding a keyword (``xgettext_options``)."""

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [*makemessages.Command.xgettext_options, "--keyword=plural_noop:1,2"]
