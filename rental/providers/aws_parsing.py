"""Reading EC2's answers faster than botocore's own parsers, to the same result.

A describe of 10,000 instances is parsed in the sync worker, and botocore's parsing was
most of the sync's time in the portal: every timestamp through dateutil, and every member
an instance's shape declares walked for each structure. ``ResponseParsers`` is registered
on the shared boto3 session (``rental.providers.aws``).
``tests/rental/providers/test_aws_parsing.py`` compares both with botocore's own output.
``EC2Parser`` overrides botocore's private ``_handle_structure`` (and calls its
``_build_name_to_xml_node`` and ``_parse_shape``): a botocore upgrade that changes them is
caught by those tests.
"""

from contextlib import suppress
from datetime import datetime
from typing import Any, ClassVar

from botocore import parsers
from botocore.utils import parse_timestamp


class ResponseParsers(parsers.ResponseParserFactory):
    """botocore's parsers, with the faster timestamps below and, for EC2's answers,
    ``EC2Parser``. A describe of 10,000 instances is parsed in the worker; botocore's own
    parsing was most of the sync's time in the portal (issue 19)."""

    def __init__(self) -> None:
        super().__init__()
        self.set_parser_defaults(timestamp_parser=parse_iso_first)

    def create_parser(self, protocol_name: str) -> parsers.ResponseParser:
        if protocol_name == "ec2":
            return EC2Parser(timestamp_parser=parse_iso_first)
        return super().create_parser(protocol_name)


class EC2Parser(parsers.EC2QueryParser):
    """botocore's EC2 parser, reading each structure by the elements its XML holds instead
    of by every member its shape declares (an instance declares about 60, an answer holds
    about 10): the same result, in about half the time. A shape with anything but plain
    members (attributes, flattened lists, unions, errors) is read by botocore's own code."""

    _members: ClassVar[dict[str, dict[str, tuple[str, Any]] | None]] = {}

    def _handle_structure(self, shape: Any, node: Any) -> dict[str, Any]:
        members = self._plain_members(shape)
        if members is None:
            return super()._handle_structure(shape, node)
        parsed: dict[str, Any] = {}
        for xml_name, member_node in self._build_name_to_xml_node(node).items():
            member = members.get(xml_name)
            if member is not None:
                parsed[member[0]] = self._parse_shape(member[1], member_node)
        return parsed

    @classmethod
    def _plain_members(cls, shape: Any) -> dict[str, tuple[str, Any]] | None:
        """The shape's members by their XML name, or None when botocore's walk is needed."""
        try:
            return cls._members[shape.name]
        except KeyError:
            pass
        members: dict[str, tuple[str, Any]] | None = {}
        if shape.metadata.get("exception") or getattr(shape, "is_tagged_union", False):
            members = None
        else:
            for name, member in shape.members.items():
                serialization = member.serialization
                xml_name = serialization.get("name") or name
                if (
                    serialization.get("xmlAttribute")
                    or serialization.get("location")
                    or serialization.get("eventheader")
                    or (member.type_name == "list" and serialization.get("flattened"))
                    or xml_name in members
                ):
                    members = None
                    break
                members[xml_name] = (name, member)
        cls._members[shape.name] = members
        return members


def parse_iso_first(text: str) -> datetime:
    """A timestamp in an answer, as botocore's own parser reads it (aware when the text
    names its zone, naive otherwise). EC2 sends ISO 8601, which the standard library reads
    first: botocore's general parser (dateutil) costs about 0.2 ms a timestamp, two
    seconds of a describe of 10,000 instances. Anything else (a number of seconds, an RFC
    822 date) goes to botocore's."""
    with suppress(ValueError):
        float(text)
        return parse_timestamp(text)  # an epoch: "20261205" is not a date to botocore
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return parse_timestamp(text)
