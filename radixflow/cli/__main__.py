import sys

from radixflow.cli.app import main

sys.exit(main())
