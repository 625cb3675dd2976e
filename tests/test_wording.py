from drkernel.wording import counted


def test_counted_says_one_in_the_singular():
    assert [counted(n, "problem") for n in (0, 1, 2)] == ["0 problems", "1 problem", "2 problems"]
    assert counted(1, "try", "tries") == "1 try" and counted(3, "try", "tries") == "3 tries"
