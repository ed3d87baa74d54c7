"""Simplified Chinese: the same numeric dates as English (see ``portal.formats``), which
Chinese readers use as they are; month names stay Django's."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
