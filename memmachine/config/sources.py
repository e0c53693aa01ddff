"""Where settings come from besides the environment: the optional YAML file named by
``MEMMACHINE_CONFIG``, and the base class every settings section shares."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
)

from memmachine.errors import ConfigurationError

__all__ = ["CONFIG_FILE_VARIABLE", "Section", "split_list"]

#: The environment variable naming the optional YAML settings file.
CONFIG_FILE_VARIABLE = "MEMMACHINE_CONFIG"

# ---------------------------------------------------------------------- the YAML file


def _read_config_file() -> dict[str, Any]:
    """The mapping in the file named by ``MEMMACHINE_CONFIG``; empty when it is unset."""
    name = os.environ.get(CONFIG_FILE_VARIABLE, "").strip()
    if not name:
        return {}
    path = Path(name).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"{CONFIG_FILE_VARIABLE}={name}: cannot read the file ({exc.strerror or exc})"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigurationError(f"{CONFIG_FILE_VARIABLE}={name}: invalid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"{CONFIG_FILE_VARIABLE}={name}: the top level must be a mapping")
    return data


def split_list(value: Any) -> Any:
    """A list setting given as text: a JSON list, or comma-separated items."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class _YamlFileSource(PydanticBaseSettingsSource):
    """One settings class's share of the YAML file: the whole file minus the nested sections
    for :class:`Settings`, or the mapping under ``section`` for a nested section class."""

    def __init__(self, settings_cls: type[BaseSettings], section: str | None) -> None:
        super().__init__(settings_cls)
        self._section = section

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: __call__ maps the whole file at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        data = _read_config_file()
        fields = set(self.settings_cls.model_fields)
        if self._section is not None:
            section = data.get(self._section) or {}
            if not isinstance(section, dict):
                raise ConfigurationError(
                    f"{CONFIG_FILE_VARIABLE}: {self._section!r} must be a mapping"
                )
            _reject_unknown(section.keys() - fields, prefix=f"{self._section}.")
            return dict(section)
        nested = {
            name
            for name, info in self.settings_cls.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, Section)
        }
        values: dict[str, Any] = {}
        unknown: list[str] = []
        for key, value in data.items():
            key = str(key)
            if key in nested:
                continue  # read by the section's own settings class, below the environment
            if key in fields:
                values[key] = value
            elif isinstance(value, dict):
                for name, inner in _flatten(key, value):
                    if name in fields and name not in nested:
                        values[name] = inner
                    else:
                        unknown.append(name)
            else:
                unknown.append(key)
        _reject_unknown(unknown)
        return values


def _flatten(prefix: str, mapping: dict[Any, Any]) -> list[tuple[str, Any]]:
    """``("episode_store", {"url": u})`` → ``[("episode_store_url", u)]``, recursively."""
    out: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        name = f"{prefix}_{key}"
        if isinstance(value, dict):
            out += _flatten(name, value)
        else:
            out.append((name, value))
    return out


def _reject_unknown(keys: Any, prefix: str = "") -> None:
    names = sorted(f"{prefix}{key}" for key in keys)
    if names:
        raise ConfigurationError(
            f"{CONFIG_FILE_VARIABLE}: unknown setting(s) {', '.join(names)} in the file"
        )


class Section(BaseSettings):
    """A nested settings class that reads its own environment prefix and its own mapping of
    the YAML file, so that an environment variable beats the file inside sections too."""

    yaml_section: ClassVar[str | None] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_file = _YamlFileSource(settings_cls, cls.yaml_section)
        return init_settings, env_settings, dotenv_settings, yaml_file, file_secret_settings
