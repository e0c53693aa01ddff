"""The injection guard's rules for instructions written in Spanish, German and French.

They mirror the English rules (:mod:`memmachine.safety.poisoning`) kind by kind and by the
same test of what is aimed at the model: an order to ignore needs earlier *instructions,
rules or prompts* after it (``ignora las instrucciones anteriores``, ``ignoriere alle
vorherigen Anweisungen``, ``ignore les instructions précédentes``), not "what I said about
coffee"; "you are now" needs an AI, a persona or "without restrictions" after it; "act as" is
the imperative (``actúa como``, ``verhalte dich wie``, ``comporte-toi comme``), and where the
imperative is also the first person (German ``agiere``, French ``agis``) only when it opens
a sentence. A reveal of generic "instructions" needs "your" (``tus``, ``deine``, ``tes``).
The rules run only when the text holds one of the words they start from (a cheap first
test: a split and a set lookup, so that texts in other languages pay no regex search).
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
    STANDING_ORDERS,
    UNRESTRICTED_MODE,
    Rule,
)

__all__ = ["RULES", "applies"]

_FLAGS = re.IGNORECASE | re.MULTILINE
_SP = r"\s{1,3}"
_START = r"(?:^|[.!?;:\n¡¿]\s{0,5})"

#: The words the rules start from (each rule's first word, lower case): a text holding none
#: of them is not searched.
_TRIGGER_WORDS = """
    ignora ignore ignoren ignorad olvida olvide olviden descarta descarte omite omita sigas
    siga deja pasa haz desobedece eres ahora actúa actua actúe actue compórtate comportate
    compórtese comportese interpreta juega finge finja revela muéstrame muestrame muestra
    imprime repite dime dame enséñame ensename comparte cuáles cuales activa habilita entra
    cambia
    ignoriere ignorier ignorieren vergiss vergessen missachte missachten übergehe ubergehe
    übergehen ubergehen umgehe umgehen befolge bist sind jetzt sofort nun verhalte benimm
    agiere fungiere spiele übernimm ubernimm tu gib zeig zeige nenne verrate wiederhole drucke
    enthülle enthulle offenbare aktiviere aktivier wechsle starte schalte
    ignorez oublie oubliez tiens tenez fais faites contourne contournez suis suivez maintenant
    désormais desormais présent dorénavant dorenavant comporte-toi comportez-vous agis
    agissez joue jouez incarne incarnez prétends pretends prétendez pretendez révèle revele
    révélez revelez montre montre-moi montrez affiche affichez répète repete donne-moi dis-moi
    divulgue quelles activez passe passez entre bascule développeur developpeur
"""
_TRIGGERS = frozenset(_TRIGGER_WORDS.split())
_SPLIT = re.compile(r"[\s.,!?;:¡¿\"'()«»]+")

_ES_IGNORE = (
    r"\b(?:ignora|ignore|ignoren|ignorad|olvida|olvide|olviden|descarta|descarte|omite|omita"
    r"|no\s{1,3}sigas|no\s{1,3}siga|deja\s{1,3}de\s{1,3}seguir|pasa\s{1,3}por\s{1,3}alto"
    r"|haz\s{1,3}caso\s{1,3}omiso\s{1,3}(?:de|a)|desobedece)"
)
_ES_DET = r"(?:(?:todas|todos|las|los|tus|sus|estas|esas|cualquier|de)\s{1,3}){0,3}"
_ES_ORDERS = (
    r"(?:instrucciones|indicaciones|[oó]rdenes|reglas|directrices|prompts?|mensajes|comandos"
    r"|restricciones|normas)"
)
_ES_EARLIER = r"(?:anteriores|previas|precedentes|originales|iniciales|antiguas|de\s{1,3}arriba)"

_DE_IGNORE = (
    r"\b(?:ignoriere|ignorier|ignorieren\s{1,3}Sie|vergiss|vergessen\s{1,3}Sie|missachte"
    r"|missachten\s{1,3}Sie|[üu]bergehe|[üu]bergehen\s{1,3}Sie|umgehe|umgehen\s{1,3}Sie"
    r"|befolge\s{1,3}nicht(?:\s{1,3}mehr)?)"
)
_DE_DET = r"(?:(?:alle|die|deine|Ihre|s[äa]mtliche|diese|jegliche)\s{1,3}){0,3}"
_DE_EARLIER = (
    r"(?:vorherigen|bisherigen|obigen|vorigen|fr[üu]heren|urspr[üu]nglichen|vorangegangenen"
    r"|vorstehenden|alten|anf[äa]nglichen)"
)
_DE_ORDERS = (
    r"(?:Anweisungen|Instruktionen|Befehle|Regeln|Vorgaben|Richtlinien|Prompts?|Anordnungen"
    r"|Einschr[äa]nkungen|Nachrichten)"
)

_FR_IGNORE = (
    r"(?:\bignore|\bignorez|\boublie|\boubliez|\bne\s{1,3}tiens\s{1,3}(?:plus\s{1,3})?compte"
    r"\s{1,3}(?:de|des|du)|\bne\s{1,3}tenez\s{1,3}(?:plus\s{1,3})?compte\s{1,3}(?:de|des|du)"
    r"|\bfais\s{1,3}abstraction\s{1,3}(?:de|des)|\bfaites\s{1,3}abstraction\s{1,3}(?:de|des)"
    r"|\bcontourne|\bcontournez|\bne\s{1,3}suis\s{1,3}plus|\bne\s{1,3}suivez\s{1,3}plus)"
)
_FR_DET = r"(?:(?:toutes|tous|les|tes|vos|ces|l'|d'|toute|la)\s{0,3}){0,3}"
_FR_ORDERS = (
    r"(?:instructions|consignes|directives|r[èe]gles|ordres|commandes|prompts?|messages"
    r"|contraintes)"
)
_FR_EARLIER = (
    r"(?:pr[ée]c[ée]dentes|ant[ée]rieures|ci-dessus|initiales|originales|d'origine|anciennes"
    r"|donn[ée]es\s{1,3}(?:avant|plus\s{1,3}haut))"
)

_AI = (
    r"(?:ia|ki|ai|assistente?|assistant|asistente|bot|chatbot|mod[eè]le?|modell|modelo|persona"
    r"|personnage|personaje|figur|modo|modus|mode|gpt|llm)\b|dan\b"
)
_FREE = (
    r"|sin\s{1,3}(?:restricciones|filtros|censura|l[ií]mites)|libre\s{1,3}de"
    r"|ohne\s{1,3}(?:Einschr[äa]nkungen|Filter|Zensur|Regeln)|uneingeschr[äa]nkt|unzensiert"
    r"|frei\s{1,3}von|sans\s{1,3}(?:restrictions?|filtres?|censure|limites?)|libre\s{1,3}de"
    r"|d[ée]brid[ée]"
)

RULES: tuple[Rule, ...] = (
    (
        re.compile(
            rf"{_ES_IGNORE}{_SP}{_ES_DET}(?:{_ES_ORDERS}{_SP}{_ES_EARLIER}|{_ES_EARLIER}{_SP}"
            rf"{_ES_ORDERS})\b"
            rf"|{_DE_IGNORE}{_SP}{_DE_DET}{_DE_EARLIER}{_SP}{_DE_ORDERS}\b"
            rf"|{_FR_IGNORE}\s{{0,3}}{_FR_DET}(?:{_FR_ORDERS}{_SP}{_FR_EARLIER}|{_FR_EARLIER}"
            rf"{_SP}{_FR_ORDERS})\b",
            _FLAGS,
        ),
        IGNORE_EARLIER,
    ),
    (
        re.compile(
            rf"{_ES_IGNORE}{_SP}{_ES_DET}(?:(?:el|tu)\s{{1,3}})?(?:(?:prompt|mensaje|instrucciones)"
            r"\s{1,3}del\s{1,3}sistema|(?:reglas|normas|filtros)\s{1,3}de\s{1,3}seguridad"
            r"|pol[ií]ticas?\s{1,3}de\s{1,3}contenido)"
            rf"|{_DE_IGNORE}{_SP}{_DE_DET}(?:(?:den|deinen|Ihren)\s{{1,3}})?(?:System-?prompt"
            r"|Systemanweisungen|Systemnachricht|Sicherheitsregeln|Sicherheitsrichtlinien"
            r"|Inhaltsrichtlinien|Schutzma[ßs]nahmen)"
            rf"|{_FR_IGNORE}\s{{0,3}}{_FR_DET}(?:(?:le|ton|votre)\s{{1,3}})?(?:(?:prompt|message"
            r"|instructions)\s{1,3}(?:du\s{1,3})?syst[èe]me|r[èe]gles\s{1,3}de\s{1,3}s[ée]curit[ée]"
            r"|consignes\s{1,3}de\s{1,3}s[ée]curit[ée]|politique\s{1,3}de\s{1,3}contenu"
            r"|garde-fous|filtres)",
            _FLAGS,
        ),
        DISREGARD_SYSTEM,
    ),
    (
        re.compile(
            r"\b(?:(?:ahora|a\s{1,3}partir\s{1,3}de\s{1,3}ahora),?\s{1,3}(?:t[uú]\s{1,3})?eres"
            r"|(?:du\s{1,3}bist|Sie\s{1,3}sind)\s{1,3}(?:jetzt|nun|ab\s{1,3}sofort|ab\s{1,3}jetzt)"
            r"|(?:tu\s{1,3}es|vous\s{1,3}[eê]tes)\s{1,3}(?:maintenant|d[ée]sormais|[àa]\s{1,3}"
            r"pr[ée]sent))"
            rf"\s{{1,3}}(?:(?:[\w'-]{{1,30}}\s{{1,3}}){{0,3}}(?:{_AI}){_FREE})",
            _FLAGS,
        ),
        NEW_IDENTITY,
    ),
    (
        re.compile(
            r"\b(?:a\s{1,3}partir\s{1,3}de\s{1,3}ahora|de\s{1,3}ahora\s{1,3}en\s{1,3}adelante),?"
            r"\s{1,3}(?:t[uú]\s{1,3})?(?:debes|deber[aá]s|responder[aá]s|vas\s{1,3}a|siempre"
            r"|nunca|solo|s[oó]lo|responde|contesta)\b"
            r"|\b(?:ab\s{1,3}jetzt|ab\s{1,3}sofort|von\s{1,3}nun\s{1,3}an),?\s{1,3}"
            r"(?:(?:wirst|musst|sollst|darfst)\s{1,3}du|du\s{1,3}(?:wirst|musst|sollst|antwortest"
            r"|darfst)|Sie\s{1,3}(?:werden|m[üu]ssen|sollen)|(?:werden|m[üu]ssen)\s{1,3}Sie"
            r"|antworte)\b"
            r"|(?:[àa]\s{1,3}partir\s{1,3}de\s{1,3}maintenant|d[ée]sormais|dor[ée]navant),?\s{1,3}"
            r"(?:tu|vous)\s{1,3}(?:dois|devez|vas|allez|r[ée]pondras|r[ée]pondrez|r[ée]ponds"
            r"|r[ée]pondez|ne|n'|seras|serez|toujours|uniquement|jamais)",
            _FLAGS,
        ),
        STANDING_ORDERS,
    ),
    (
        re.compile(
            r"\b(?:act[uú]a|act[uú]e|comp[oó]rtate|comp[oó]rtese)\s{1,3}como\b"
            r"|\b(?:interpreta|juega|haz)\s{1,3}(?:el\s{1,3})?papel\s{1,3}de\b"
            r"|\b(?:verhalte|benimm)\s{1,3}dich\s{1,3}(?:wie|als)\b"
            rf"|{_START}(?:bitte\s{{1,3}})?(?:agiere|fungiere)\s{{1,3}}als\b"
            r"|\b(?:spiele|[üu]bernimm)\s{1,3}die\s{1,3}Rolle\b"
            r"|\b(?:comporte-toi|comportez-vous)\s{1,3}comme\b"
            rf"|{_START}(?:agis|agissez)\s{{1,3}}(?:comme|en\s{{1,3}}tant\s{{1,3}}que)\b"
            r"|\b(?:joue|jouez|incarne|incarnez)\s{1,3}(?:le\s{1,3})?r[ôo]le\s{1,3}(?:de|d')",
            _FLAGS,
        ),
        ACT_AS,
    ),
    (
        re.compile(
            r"\b(?:finge|finja)\s{1,3}(?:ser|que\s{1,3}eres)\b"
            r"|\btu\s{1,3}so,?\s{1,3}als\s{1,3}(?:ob\s{1,3})?(?:du|w[äa]rst)\b"
            r"|\bgib\s{1,3}vor,?\s{1,3}(?:du\s{1,3}w[äa]rst|zu\s{1,3}sein)\b"
            rf"|{_START}(?:fais|faites)\s{{1,3}}semblant\s{{1,3}}d'[eê]tre"
            r"|\b(?:pr[ée]tends|pr[ée]tendez)\s{1,3}[eê]tre\b",
            _FLAGS,
        ),
        PRETEND,
    ),
    (
        re.compile(
            r"\b(?:revela|mu[eé]strame|muestra|imprime|repite|dime|dame|ens[eé][ñn]ame|comparte)"
            r"\s{1,3}(?:(?:tu|tus|el|las|los)\s{1,3})?(?:(?:prompt|mensaje|instrucciones)\s{1,3}"
            r"del\s{1,3}sistema|prompt\s{1,3}(?:oculto|secreto|original|inicial))"
            r"|\b(?:revela|mu[eé]strame|muestra|imprime|repite|dime|dame|ens[eé][ñn]ame)\s{1,3}"
            r"(?:tus|tu)\s{1,3}(?:instrucciones|prompt|reglas|directrices)\b"
            r"|\bcu[aá]les\s{1,3}son\s{1,3}tus\s{1,3}(?:instrucciones|reglas|directrices)\b"
            r"|\b(?:zeig|zeige|gib|nenne|verrate|wiederhole|drucke|enth[üu]lle|offenbare)"
            r"\s{1,3}(?:mir\s{1,3})?(?:(?:den|deinen|Ihren|die|deine|Ihre)\s{1,3})?"
            r"(?:(?:vollst[äa]ndigen?|geheimen?|versteckten?|urspr[üu]nglichen?)\s{1,3})?"
            r"(?:System-?prompt|Systemanweisungen|Systemnachricht)"
            r"|\b(?:zeig|zeige|gib|nenne|verrate|wiederhole)\s{1,3}(?:mir\s{1,3})?(?:deine|Ihre"
            r"|deinen|Ihren)\s{1,3}(?:Anweisungen|Prompt|Regeln|Instruktionen)\b"
            r"|\bwas\s{1,3}sind\s{1,3}(?:deine|Ihre)\s{1,3}(?:Anweisungen|Regeln|Instruktionen)\b"
            r"|\b(?:r[ée]v[èe]le|r[ée]v[ée]lez|montre|montre-moi|montrez|affiche|affichez|r[ée]p[èe]te"
            r"|donne-moi|dis-moi|imprime|divulgue)\s{1,3}(?:(?:ton|tes|votre|vos|le|les)\s{1,3})?"
            r"(?:(?:prompt|message|instructions|invite)\s{1,3}(?:du\s{1,3})?syst[èe]me"
            r"|prompt\s{1,3}(?:cach[ée]|secret|initial|original))"
            r"|\b(?:r[ée]v[èe]le|montre-moi|affiche|r[ée]p[èe]te|donne-moi|dis-moi)\s{1,3}"
            r"(?:tes|vos|ton|votre)\s{1,3}(?:instructions|consignes|r[èe]gles|prompt)\b"
            r"|\bquelles\s{1,3}sont\s{1,3}(?:tes|vos)\s{1,3}(?:instructions|consignes|r[èe]gles)\b",
            _FLAGS,
        ),
        REVEAL,
    ),
    (
        re.compile(
            r"\bolvida\s{1,3}todo\s{1,3}lo\s{1,3}(?:anterior|que\s{1,3}te\s{1,3}(?:dijeron|han"
            r"\s{1,3}dicho|ense[ñn]aron|he\s{1,3}dicho))"
            r"|\bvergiss\s{1,3}alles,?\s{1,3}(?:was\s{1,3}(?:man\s{1,3})?dir\s{1,3}(?:gesagt"
            r"|beigebracht)|was\s{1,3}(?:oben|vorher|bisher|zuvor)|(?:oben|vorher|bisher|zuvor"
            r"|Bisherige))"
            r"|\boublie(?:z)?\s{1,3}tout\s{1,3}ce\s{1,3}(?:qu'on\s{1,3}(?:t'a|vous\s{1,3}a)\s{1,3}"
            r"dit|qui\s{1,3}pr[ée]c[èe]de|que\s{1,3}(?:tu\s{1,3}as|vous\s{1,3}avez)\s{1,3}appris)",
            _FLAGS,
        ),
        FORGET,
    ),
    (
        re.compile(
            r"\b(?:activa|habilita|entra\s{1,3}en|cambia\s{1,3}a)\s{1,3}(?:el\s{1,3})?modo\s{1,3}"
            r"(?:desarrollador|dan|jailbreak|dios|sin\s{1,3}restricciones)\b"
            r"|\b(?:aktiviere|aktivier|wechsle\s{1,3}in|starte|schalte)\s{1,3}(?:den\s{1,3})?"
            r"(?:Entwicklermodus|Developer-?Modus|DAN-?Modus|Jailbreak-?Modus|Gott-?Modus"
            r"|uneingeschr[äa]nkten\s{1,3}Modus)"
            r"|\b(?:active|activez|passe\s{1,3}en|passez\s{1,3}en|entre\s{1,3}en|bascule\s{1,3}en)"
            r"\s{1,3}(?:le\s{1,3})?mode\s{1,3}(?:d[ée]veloppeur|dan|jailbreak|dieu"
            r"|sans\s{1,3}restriction)",
            _FLAGS,
        ),
        UNRESTRICTED_MODE,
    ),
)


def applies(text: str) -> bool:
    """Whether ``text`` holds one of the words these rules start from."""
    return not _TRIGGERS.isdisjoint(_SPLIT.split(text.lower()))
