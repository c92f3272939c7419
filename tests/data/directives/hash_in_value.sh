#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/run#3
