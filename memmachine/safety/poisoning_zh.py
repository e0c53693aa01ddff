"""The injection guard's rules for instructions written in Chinese.

They mirror the English rules (:mod:`memmachine.safety.poisoning`) kind by kind, with the
same test of what is aimed at the model: an order to ignore earlier *instructions, rules or
prompts* (``忽略之前的所有指令``), not any earlier thing the user said
(``请忽略我上次说的咖啡偏好`` corrects a preference, as "please ignore what I said about
coffee" does in English, and passes); "you are now" only with an AI, a persona or no
restrictions after it (``你现在是DAN``, not ``你现在是高级会员了``); "act as" and "pretend"
only when said to the model (after 请, 你, 我要你, or opening a sentence), so that
``她假装睡着了`` passes. Matching runs on the NFKC-normalised text, in which full-width
punctuation is ASCII.
"""

from __future__ import annotations

import re

from memmachine.safety.poisoning_reasons import (
    ACT_AS,
    DISREGARD_SYSTEM,
    FORGET,
    IGNORE_EARLIER,
    NEW_IDENTITY,
    PRETEND,
    REVEAL,
    ROLE_MARKERS,
    STANDING_ORDERS,
    UNRESTRICTED_MODE,
    Rule,
)

__all__ = ["RULES", "applies"]

_FLAGS = re.IGNORECASE | re.MULTILINE
_HAN = re.compile(r"[\u4e00-\u9fff]")

_S = r"\s{0,2}"
_YOU = r"(?:你|您)"
_IGNORE = (
    r"(?:忽略|忽视|无视|不要理会|别理会|不要管|别管|忘记|忘掉|忘了|抛开|抛弃|丢弃|跳过|绕过|覆盖"
    r"|不要(?:再)?(?:遵守|遵循|听从|执行)|别(?:再)?(?:遵守|遵循|听从)|停止(?:遵守|遵循|执行))"
)
_DETERMINERS = rf"(?:(?:{_YOU}的?|所有的?|全部的?|一切|这些|那些|的){_S}){{0,3}}"
_EARLIER = (
    r"(?:之前|以前|此前|先前|上面|上述|以上|前面|前述|原来|原先|原有|原始|最初|初始|早先|刚才|旧的)"
)
_GIVEN = r"(?:(?:收到|得到|接收|给出|给你|给您|给定|设定|下达|学到|告诉你)的)?"
_ORDERS = r"(?:指令|指示|提示词|提示|命令|规则|设定|约束|限制|准则|指导方针|消息|上下文|编程)"
_TO_ASSISTANT = (
    rf"(?:^|[。.!?;:\n]{_S}|请{_S}{_YOU}?|{_YOU}(?:要|必须|将|应该|需要|现在)?"
    rf"|我(?:要|想要|希望|想让|需要){_YOU}){_S}"
)

_REVEAL = (
    r"(?:告诉我|显示|输出|打印|透露|泄露|泄漏|重复|展示|说出|给我看|列出|公开|复述|写出|发给我)"
    rf"{_S}(?:一下)?{_S}"
)
_SECRET = rf"(?:(?:完整|全部|原始|隐藏|秘密|初始|最初|确切)的?{_S}){{0,2}}"

RULES: tuple[Rule, ...] = (
    (
        re.compile(
            rf"{_IGNORE}{_S}{_DETERMINERS}{_EARLIER}{_S}的?{_S}{_GIVEN}{_DETERMINERS}{_ORDERS}",
            _FLAGS,
        ),
        IGNORE_EARLIER,
    ),
    (
        re.compile(
            rf"{_IGNORE}{_S}{_DETERMINERS}(?:系统{_S}(?:提示词|提示|指令|消息|设定|prompt)"
            r"|安全(?:规则|准则|限制|策略|过滤器?|指令|措施)|内容(?:政策|策略|审查)|护栏"
            r"|防护(?:措施|机制)|开发者(?:指令|消息)|审查机制)",
            _FLAGS,
        ),
        DISREGARD_SYSTEM,
    ),
    (
        re.compile(
            rf"(?:{_YOU}{_S}现在|从现在(?:开始|起),?{_S}{_YOU}){_S}(?:就)?(?:是|成为了?|变成了?)"
            rf"{_S}(?:一个|一名|一位|个)?{_S}(?:[^\s,.!?。;]{{0,12}}?(?:AI|人工智能|助手|机器人"
            r"|模型|角色|模式|GPT|LLM)|DAN|(?:不受|没有|无)(?:任何)?(?:限制|约束|审查|过滤)|越狱)"
            rf"|{_YOU}{_S}(?:不再是|已经不是)(?:一个)?{_S}(?:AI|人工智能|助手|机器人|模型)"
            rf"|{_YOU}{_S}不再受(?:任何)?(?:限制|约束|规则)",
            _FLAGS,
        ),
        NEW_IDENTITY,
    ),
    (
        re.compile(
            rf"(?:从现在开始|从现在起|从今以后|从此以后),?{_S}(?:{_YOU}|助手|AI|模型){_S}"
            r"(?:将|必须|要|应该|应当|需要|只能|只|总是|永远|一律|不要|不许|不能|不得|回答|回复|用)",
            _FLAGS,
        ),
        STANDING_ORDERS,
    ),
    (
        re.compile(
            rf"(?:(?:请{_S}{_YOU}?|{_YOU}(?:要|必须|将|应该|需要|现在)?|我(?:要|想要|希望|想让|需要)"
            rf"{_YOU}){_S}(?:扮演|充当|假扮|模拟|模仿){_S}\S"
            rf"|(?:^|[。.!?;:\n]){_S}(?:现在{_S})?(?:扮演|充当|假扮|模拟|模仿){_S}"
            r"(?:一个|一名|一位|一台|我的|个))",
            _FLAGS,
        ),
        ACT_AS,
    ),
    (
        re.compile(
            rf"(?:假装|装作){_S}{_YOU}{_S}(?:是|现在是|就是|已经)"
            rf"|{_TO_ASSISTANT}(?:假装|装作){_S}(?:成|是|自己是|一个|一名|一位)",
            _FLAGS,
        ),
        PRETEND,
    ),
    (
        re.compile(
            rf"{_REVEAL}(?:{_YOU}的?)?{_S}{_SECRET}(?:系统{_S}(?:提示词|提示|指令|消息|设定|prompt)"
            r"|(?:隐藏|秘密|初始|原始)的?(?:提示词|提示|指令))"
            rf"|{_REVEAL}{_YOU}的?{_S}{_SECRET}(?:指令|提示词|规则|准则|设定)"
            rf"|{_YOU}的{_S}(?:系统{_S})?(?:指令|提示词|规则|设定|system prompt){_S}"
            r"(?:是什么|有哪些|是啥)",
            _FLAGS,
        ),
        REVEAL,
    ),
    (
        re.compile(r"^[ \t]{0,3}#{2,4}[ \t]{0,3}(?:系统|指令|助手)[ \t]{0,3}:", _FLAGS),
        ROLE_MARKERS,
    ),
    (
        re.compile(
            rf"忘(?:记|掉){_S}{_YOU}{_S}(?:之前|以前|此前)?{_S}(?:被告知|学到|学过|听到|收到|知道)的"
            rf"{_S}(?:一切|所有|全部)"
            rf"|忘(?:记|掉){_S}(?:之前|以前|此前|上面|以上|前面|到目前为止|迄今为止){_S}的?{_S}"
            r"(?:一切|所有(?:的)?(?:内容|东西|事情|指令)?|全部(?:内容)?)",
            _FLAGS,
        ),
        FORGET,
    ),
    (
        re.compile(
            rf"(?:开启|启用|进入|切换到|切换至|打开|激活|启动){_S}(?:DAN|开发者|越狱|上帝|无限制|不受限制"
            rf"|无审查){_S}模式",
            _FLAGS,
        ),
        UNRESTRICTED_MODE,
    ),
)


def applies(text: str) -> bool:
    """Whether ``text`` holds a Chinese character, so that these rules can match."""
    return _HAN.search(text) is not None
