"""Unit tests of workbench.data, with a small hand-written article set (no real assets loaded)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "hub"

# (doc_id/title, description, topic, extract); texts written for these tests.
_ARTICLES = [
    (
        "Paris",
        "Capital city of France",
        "Places",
        "Paris is the capital and largest city of France. It lies on the Seine river in the north of the country. "
        "The city has been a major centre of finance, fashion and the arts since the 17th century.",
    ),
    (
        "France",
        "Country in Western Europe",
        "Places",
        "France is a country in Western Europe with overseas regions on several continents. Its capital is Paris. "
        "The country shares borders with Belgium, Germany, Switzerland, Italy and Spain.",
    ),
    (
        "Seine",
        "River in northern France",
        "Places",
        "The Seine is a river in northern France that flows into the English Channel. "
        "It is about 777 kilometres long and passes through Paris on its way to the sea.",
    ),
    (
        "Lake Geneva",
        "Lake in Switzerland and France",
        "Places",
        "Lake Geneva is a deep lake on the north side of the Alps, shared between Switzerland and France. "
        "It is one of the largest bodies of fresh water in Western Europe.",
    ),
    (
        "Mount Kilimanjaro",
        "Dormant volcano in Tanzania",
        "Places",
        "Mount Kilimanjaro is a dormant volcano in Tanzania. "
        "Its summit is the highest point in Africa at nearly 5,900 metres above sea level.",
    ),
    (
        "Dune (novel)",
        "1965 novel by Frank Herbert",
        "Arts",
        "Dune is a 1965 science fiction novel by the American author Frank Herbert. It is set in the distant "
        "future on the desert planet Arrakis. The book won the first Nebula Award for Best Novel.",
    ),
    (
        "Frank Herbert",
        "American science fiction writer (1920–1986)",
        "Arts",
        "Frank Herbert was an American science fiction writer best known for one novel about a desert planet. "
        "He worked as a journalist before writing fiction. Herbert died in 1986 in Madison, Wisconsin.",
    ),
    (
        "The Starry Night",
        "1889 painting held in New York",
        "Arts",
        "The Starry Night is an oil-on-canvas painting by the Dutch painter Vincent van Gogh. It shows the view "
        "from his asylum room window just before sunrise, with an imaginary village.",
    ),
    (
        "Vincent van Gogh",
        "Dutch painter (1853–1890)",
        "Arts",
        "Vincent van Gogh was a Dutch Post-Impressionist painter who made about 2,100 artworks. He is among the "
        "most famous figures in the history of Western art. He spent his final years in France, where he died.",
    ),
    (
        "Jazz",
        "Music genre",
        "Arts",
        "Jazz is a music genre that began in the African-American communities of New Orleans in the late 19th "
        "century. Its roots lie in the blues and in ragtime. Improvisation and swing are central features.",
    ),
    (
        "New Orleans",
        "City in Louisiana, United States",
        "Places",
        "New Orleans is a city in the U.S. state of Louisiana on the Mississippi River. It is known for its "
        "distinct music, Creole food and annual festivals. The city was founded by settlers in 1718.",
    ),
    (
        "Photosynthesis",
        "Biological process converting light into chemical energy",
        "Science",
        "Photosynthesis is the process by which plants and some other organisms turn light energy into chemical "
        "energy. The energy is stored in sugars made from carbon dioxide and water. Oxygen is given off.",
    ),
    (
        "Tomato",
        "Edible berry",
        "Science",
        "The tomato is the edible berry of a plant in the nightshade family. Tomatoes are grown worldwide and "
        "are eaten raw or cooked in many dishes. The plant originated in western South America.",
    ),
    (
        "Hydrogen",
        "Chemical element with atomic number 1",
        "Science",
        "Hydrogen is the chemical element with the symbol H and atomic number 1. It is the lightest element "
        "and the most abundant substance in the universe. Stars are mostly made of its plasma.",
    ),
    (
        "Albert Einstein",
        "German-born physicist (1879–1955)",
        "Science",
        "Albert Einstein was a German-born theoretical physicist who developed the theory of relativity. "
        "He received the 1921 Nobel Prize in Physics for his work on light. He later lived in Princeton.",
    ),
    (
        "Pi",
        "Mathematical constant",
        "Science",
        "The number π is a mathematical constant, approximately equal to 3.14159. "
        "It is the ratio of the circumference of a circle to its diameter in flat geometry.",
    ),
    (
        "Speed of light",
        "",
        "Science",
        "The speed of light in vacuum is a universal physical constant of exactly 299,792,458 metres per second. "
        "It is the upper limit for the speed at which matter and information can travel.",
    ),
    (
        "Coffee",
        "Brewed drink made from roasted beans",
        "Everyday life",
        "Coffee is a drink made from roasted coffee beans. It is one of the most popular drinks in the world "
        "and is usually served hot. The plant is grown in tropical regions of Africa, Asia and South America.",
    ),
    (
        "French Revolution",
        "Revolution in France from 1789 to 1799",
        "History",
        "The French Revolution was a period of political and social upheaval in France that began in 1789. "
        "It ended the absolute monarchy and led to the rise of Napoleon. Its ideas shaped modern democracy.",
    ),
    (
        "Napoleon",
        "French emperor and military leader (1769–1821)",
        "History",
        "Napoleon Bonaparte was a French military leader who rose to power during the French Revolution. He "
        "crowned himself emperor of the French in 1804. He was defeated at the Battle of Waterloo in 1815.",
    ),
    (
        "Magna Carta",
        "Charter of rights agreed in 1215",
        "History",
        "Magna Carta is a royal charter of rights agreed to by King John of England in 1215. "
        "It limited the power of the king and later became a symbol of liberty in many countries.",
    ),
]


def fake_articles():
    """21 small hand-written articles in 6 topics (3 of them 'History', the default OOD topic)."""
    from workbench.data.wikiqa import WikiArticle

    return [WikiArticle(t, t, extract, desc, topic) for t, desc, topic, extract in _ARTICLES]


def by_title(title: str):
    """The fake article with this title."""
    return next(a for a in fake_articles() if a.title == title)
