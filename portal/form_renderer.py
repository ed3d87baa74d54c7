"""Form widgets drawn from Django's Jinja2 templates, where Django has them.

Django keeps each of its widget and form templates twice, for its own template engine
and for Jinja2, with the same markup. Jinja2 draws them several times faster: on the bench
machine about a millisecond of the project page (its quota form) and several of the
request form. The admin's widgets (a related object's add and change links, and so on)
exist for Django's engine only, so a template Jinja2 does not find is drawn by Django's.
"""

from typing import Any

from django.forms.renderers import BaseRenderer, DjangoTemplates, Jinja2
from django.template import TemplateDoesNotExist


class JinjaFirst(BaseRenderer):
    """``FORM_RENDERER``: Django's Jinja2 widget templates, else Django's own engine."""

    def __init__(self) -> None:
        self.jinja = Jinja2()
        self.django = DjangoTemplates()

    def get_template(self, template_name: str) -> Any:
        try:
            return self.jinja.get_template(template_name)
        except TemplateDoesNotExist:
            return self.django.get_template(template_name)
