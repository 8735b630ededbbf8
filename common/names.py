"""The one pattern for names a user gives: regions, durable ids, CQ names."""

import re

NAME_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
