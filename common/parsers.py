"""The REST request parser (DEFAULT_PARSER_CLASSES).

A module of its own: DRF imports it while building APIView, so it must not
import rest_framework.views (common.api does, and importing the
parser from there made a circular import for any command that loaded the
serializers first).
"""

from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions, parsers


class StrictJSONParser(parsers.JSONParser):
    """DRF's JSON parser, answering 400 (not 500) to JSON nested too deeply.

    ``json.loads`` raises RecursionError, which DRF does not catch, for
    input nested about a thousand levels deep.
    """

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise exceptions.ParseError("JSON nested too deeply") from exc
