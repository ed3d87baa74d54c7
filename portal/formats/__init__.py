"""The portal's date and time formats, one per language (``FORMAT_MODULE_PATH``).

Django takes a language's formats from its locale module (``django.conf.locale``), so
the admin wrote "Dec. 3, 2026, 4:03 p.m." where the portal's pages write
"2026-12-03 16:03". Each module here names only the formats that differ; anything it
leaves out (input formats, month names) still comes from Django's locale module. Times
are UTC everywhere, to the minute; pages that need seconds say so with their own format.
"""
