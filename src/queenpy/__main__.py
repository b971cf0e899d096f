from queenpy.cli import main

main()
