from formloop.cli import main

main()
